"""A chat channel: its stream, router, pairing, dispatch and flood control."""
