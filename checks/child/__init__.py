"""Scripts run by the engine's interpreter (`python -I script.py`); they import only the standard library
until they need to, and never import nemolaunch."""
