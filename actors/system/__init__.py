"""The node, the directory of live actors, and start-up recovery."""
