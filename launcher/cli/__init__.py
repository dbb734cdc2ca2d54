"""The command line: one module per command, each parsing its options, calling its stage and rendering."""
