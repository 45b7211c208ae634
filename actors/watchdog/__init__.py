"""The node watching itself: checks, incidents, and what auto mode does."""
