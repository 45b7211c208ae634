"""The ``reel`` command line. Exit codes: 0 success, 1 a negative answer (tampered journal,
failed run), 2 usage errors and anything that prevents an answer (unreadable file, no node).

Exceptions: :class:`~transports.cli.errors.CliError` (an answer already: its code is the exit);
``grpc_chat.ChatUsageError`` (``reel chat`` used wrongly); ``node_start.OptionRefused`` (a
``reel node`` option refused before anything opened, reported through typer's usage error).
Every other failure is mapped by its kind (:mod:`transports.failures`)."""
