"""The decision pipeline for a tool call and the grants a human gives."""
