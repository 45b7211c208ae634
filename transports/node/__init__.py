"""The ``reel node`` process: daemon, node file, terminal, run log."""
