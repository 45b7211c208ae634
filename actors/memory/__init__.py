"""Memory items: the one writer of ``memory/<id>`` streams and its rules."""
