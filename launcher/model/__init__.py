"""Model shapes: weightless model folders (architectures, quantization) and the tiny CPU model."""
