"""`nemolaunch serve`: vLLM launched with a profile's flags, its process owned and its log followed."""
