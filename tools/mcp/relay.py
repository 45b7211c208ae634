"""The relay that starts an ``http_egress`` MCP server inside its sandbox.

A sandbox without network has a loopback interface of its own and nothing else, so the only
way out is the node's egress proxy (tools/mcp/egress_proxy.py), listening on a Unix socket in
the server's own directory. This program, run by the sandbox's Python with ``-I -S -c`` (its
source is this file's text: it imports nothing of reel's and needs nothing but the standard
library), listens on a free port of the sandbox's loopback, starts the server with
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` naming that port, and copies each connection to
the socket and back. The server inherits stdin and stdout (the MCP stream) unchanged; the
relay writes nothing to stdout, and exits with the server's status.

The relay decides nothing: every connection is decided by the node at the other end of the
socket. A server that ignores the proxy variables has nowhere else to connect.

Usage: ``python3 -I -S -c SOURCE SOCKET PROGRAM [ARG...]``.
"""

import os
import socket
import subprocess
import sys
import threading

CHUNK = 64 * 1024


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until end of file, then end ``sink``'s writing half."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve(client: socket.socket, path: str) -> None:
    """Join one connection of the server's to the node's proxy."""
    with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as node:
        try:
            node.connect(path)
        except OSError:
            return
        back = threading.Thread(target=pipe, args=(node, client), daemon=True)
        back.start()
        pipe(client, node)
        back.join()


def accept(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    path, command = argv[0], argv[1:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = proxy
    env["NO_PROXY"] = env["no_proxy"] = ""
    threading.Thread(target=accept, args=(listener, path), daemon=True).start()
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
