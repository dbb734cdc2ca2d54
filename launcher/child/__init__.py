"""Scripts run by the engine's interpreter (`python -I script.py ...`); they never import nemolaunch."""
