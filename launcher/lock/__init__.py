"""`nemolaunch lock`: the installed stack pinned, verified and bundled."""
