"""nemolaunch: doctor, probe, profile, serve and benchmark vLLM on new NVIDIA GPUs."""

__version__ = "0.1.0"
