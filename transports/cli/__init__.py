"""The ``reel`` command line. Exit codes: 0 success, 1 a negative answer (tampered journal,
failed run), 2 usage errors and anything that prevents an answer (unreadable file, no node)."""
