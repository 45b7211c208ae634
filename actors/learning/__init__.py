"""Post-run reflection and the review of learning candidates."""
