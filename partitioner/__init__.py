"""Partitioner: tags the ops each backend supports and groups them into convex partitions."""
