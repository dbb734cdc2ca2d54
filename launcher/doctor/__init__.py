"""`nemolaunch doctor` and `fleet doctor`: is this stack (or every node of a Ray cluster) sound."""
