"""A node-graph program (see README.md)."""
