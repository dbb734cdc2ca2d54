"""`nemolaunch probe`: every kernel of vLLM's chains, measured on this GPU in isolated child processes."""
