"""How each command's result reads on a terminal: one module per command, each turning a stage's typed result
into text. Stage modules return results and never print; cli.py calls these to render them."""
