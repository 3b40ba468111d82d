"""A node-graph SD web app (see README.md)."""
