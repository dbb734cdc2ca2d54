"""The probe's kernel set-ups, one module per family (linear, MoE, attention) plus vLLM's gates for the kernels
that run on other GPUs only; kernel_probe.py imports them as `probe_kernels` (launcher/child is its sys.path[0]).
Each set-up is `setup(m, n, k, layer) -> (run, reference)`: `run()` calls the kernel and returns its output,
`reference()` the float32 answer (None where the numerics cannot be checked)."""
