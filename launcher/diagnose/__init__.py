"""`nemolaunch diagnose`: a vLLM log read the way an operator reads it, with the fix for what failed."""
