"""A process that has imported the ``reel`` command once and forks a child per command line
(:func:`tests.processes.run`'s server; run as a script, imported only for its path).

Why: the suite runs ``reel ...`` about five hundred times, and each start spent half a second or
more importing the CLI and what its commands use before doing anything: a fifth of the
suite's worker time. A forked child of this process is a real process running the real
``reel`` entry point, with its own argv, environment, working directory, umask and standard
streams, and exits as the command's own would (``sys.exit``, atexit, thread joins); only the
import is shared. What differs, and how it is met:

- what is read when a process starts or a module is imported (``PYTHON*``, the locale, ``TZ``,
  the loader's and libc's variables, OpenSSL's CA store, typer's terminal switches) is this
  process's: :func:`tests.processes.run` spawns a plain process when a command line's
  environment differs from it there (``IMPORT_TIME_ENV``);
- random state copied by the fork: the stdlib's ``random`` and reel's id generators
  (``events/ids.py``) reseed in a child; the string hash seed is this process's, shared by
  its children;
- every command module is imported already, so a command that leans on a module it does not
  import itself would pass here: ``TESTS_NO_ZYGOTE=1 make pytest`` runs the suite with plain
  processes (``tests/transports/cli/test_cli_imports.py`` checks imports with its own);
- a child's parent is this process and its ``/proc/PID/cmdline`` this script's: no converted
  call looks at either.

Protocol, one ``SOCK_SEQPACKET`` connection per command line on the listening socket whose fd
is the first argument: the client sends one JSON message (``argv``, ``env``, ``cwd``, ``umask``)
with three file descriptors (the child's stdin, stdout and stderr); the server answers
``{"pid": N}`` once the child runs and ``{"status": S}`` (a ``waitpid`` status) when it
ended. The server exits when the second argument's fd (a pipe from the test process) reaches
end of file: when the test process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def preload() -> None:
    """Import what ``reel``'s commands import: the entry point, every command's module, the
    offline journal, ``chat --local``'s composition and the node's."""
    from transports.cli.commands import COMMANDS

    importlib.import_module("transports.cli.main")
    importlib.import_module("transports.cli.group")
    for target, _ in COMMANDS.values():
        importlib.import_module(target.split(":")[0])
    for name in ("transports.journal_open", "transports.runtime", "transports.node.daemon"):
        importlib.import_module(name)
    assert threading.active_count() == 1, "an import started a thread: forking would copy it"
    # What is imported stays shared: no collection in a child walks (and so copies) it.
    gc.collect()
    gc.freeze()


def serve(listen_fd: int, control_fd: int) -> list[str]:
    """Answer command lines until the test process goes; returns (in a forked child only)
    the child's argv, its streams, directory, umask and environment already in place."""
    listener = socket.socket(fileno=listen_fd)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w.fileno())
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(control_fd, selectors.EVENT_READ, "control")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    waiting: dict[int, socket.socket] = {}  # a child's pid: its client's connection
    pending: set[socket.socket] = set()  # accepted, its request not read yet
    while True:
        for key, _ in selector.select():
            if key.data == "control":
                os._exit(0)
            if key.data == "reap":
                with contextlib.suppress(BlockingIOError):  # drained: the wake-ups are read
                    while wake_r.recv(4096):
                        pass
                _reap(waiting)
            elif key.data == "accept":
                conn, _ = listener.accept()
                pending.add(conn)
                selector.register(conn, selectors.EVENT_READ, "request")
            else:
                conn = key.fileobj  # type: ignore[assignment]
                pending.discard(conn)
                selector.unregister(conn)
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                if not message or len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                request = json.loads(message)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    os.close(control_fd)
                    owned = (listener, wake_r, wake_w, conn, *waiting.values(), *pending)
                    return _become(request, fds, owned)
                for fd in fds:
                    os.close(fd)
                waiting[pid] = conn
                _send(conn, {"pid": pid})
                _reap(waiting)


def _become(request: dict[str, Any], fds: list[int], owned: Iterable[socket.socket]) -> list[str]:
    """In a forked child: the server's sockets closed, its signal handling undone, the
    request's streams, directory, umask and environment in place; returns its argv. A failure
    here is the command never run: told on its stderr, exit 127 (as a failed exec)."""
    try:
        for own in owned:
            own.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        return list(request["argv"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(127)


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Tell each ended child's client its status."""
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            _send(conn, {"status": status})
            conn.close()


def _send(conn: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the client went (its test failed or timed out)
        conn.send(json.dumps(message).encode())


if __name__ == "__main__":
    # As the ``reel`` script's own: its directory first on the path, not this file's.
    sys.path[0] = str(Path(sys.executable).parent)
    preload()
    sys.argv = serve(int(sys.argv[1]), int(sys.argv[2]))
    from transports.cli.main import main

    main()  # it ends in sys.exit
