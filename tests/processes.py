"""Processes a test starts (``reel node`` above all): however the test ends, they end with it.

A test that starts a node and then fails before the node's ready line (a node that exits, hangs
or prints something else) used to leave that ``reel node`` running for the rest of the suite,
holding its ports, its threads and its data dir's lock. :func:`spawned` is the one way the
suite starts one: the process lives for a ``with`` block, and on the way out, if the test did
not stop it itself, it is asked to stop (SIGINT, Ctrl-C's drain) and killed if it does not
within :data:`GRACE_S`. :func:`stop` is the graceful stop a test asserts on.

:func:`run` is ``subprocess.run`` for a ``reel`` command line that runs to its end: a child
forked from a process that imported the CLI once (:mod:`tests.zygote`) rather than an
interpreter that imports it again, half a second or more sooner per command.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from tests import zygote

REEL = Path(sys.executable).with_name("reel")
"""The ``reel`` command of the interpreter running the tests."""

GRACE_S = 10.0
"""How long a node left running by a failed test has to drain before it is killed."""


def stop(process: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
    """Send ``sig`` and wait for the exit code; a process that is still running after
    ``timeout`` is killed and the test fails (a stop must never hang the suite)."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(
            f"{process.args!r} did not stop within {timeout} s of {sig!r}"
        ) from None


@contextmanager
def spawned(argv: Sequence[str | Path], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """``subprocess.Popen(argv, **popen)`` for the ``with`` block (stdin is /dev/null unless
    given): the process is stopped on the way out if it still runs, the ready line or not."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    process = subprocess.Popen([str(a) for a in argv], **popen)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def node(*args: str | Path, **popen: Any) -> AbstractContextManager[subprocess.Popen[Any]]:
    """``reel node ARGS`` under :func:`spawned`."""
    return spawned([REEL, "node", *args], **popen)


IMPORT_TIME_ENV = (
    "PYTHON",
    "LANG",
    "LC_",
    "LD_",
    "FAKETIME",
    "TERMINAL_WIDTH",
    "FORCE_COLOR",
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TYPER_",
    "_TYPER_",
)
"""Environment variables (names or prefixes) read when a process starts (the interpreter's, the
locale, the dynamic loader's, libfaketime's) or a module is imported (typer's terminal
switches): a command line whose values differ from the forking process's runs as a plain
process (:func:`run`)."""

_FORKED_KWARGS = frozenset(
    {
        "capture_output",
        "text",
        "universal_newlines",
        "timeout",
        "env",
        "input",
        "cwd",
        "check",
        "stdin",
        "stdout",
        "stderr",
    }
)


def run(argv: Sequence[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, **kwargs)``; a ``reel`` command line is run by a child of
    :mod:`tests.zygote` when its arguments and environment allow (the same exit code, output
    and :class:`subprocess.TimeoutExpired`), any other as ``subprocess.run`` would."""
    args = [str(a) for a in argv]
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    if args[0] != str(REEL) or not kwargs.keys() <= _FORKED_KWARGS or not _same_imports(env):
        return subprocess.run(args, **kwargs)
    kwargs.pop("env", None)
    return _Forks.get().run(args, env, **kwargs)


def _same_imports(env: Mapping[str, str]) -> bool:
    def pinned(names: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in names.items() if k.startswith(IMPORT_TIME_ENV)}

    return pinned(env) == pinned(_Forks.START_ENV)


class _Forks:
    """This test process's :mod:`tests.zygote`, started on first use, gone with the process."""

    START_ENV = dict(os.environ)
    _one: _Forks | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> _Forks:
        with cls._lock:
            if cls._one is None or cls._one.server.poll() is not None:
                cls._one = cls()
            return cls._one

    def __init__(self) -> None:
        self.address = f"\0reel-zygote-{os.getpid()}-{os.urandom(6).hex()}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self.address)
        listener.listen(64)
        control_r, self._control_w = os.pipe()
        fds = (listener.fileno(), control_r)
        self.server = subprocess.Popen(
            [sys.executable, zygote.__file__, *map(str, fds)],
            stdin=subprocess.DEVNULL,
            env=self.START_ENV,
            pass_fds=fds,
        )
        listener.close()
        os.close(control_r)
        atexit.register(os.close, self._control_w)

    def run(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        input: str | bytes | None = None,
        timeout: float | None = None,
        check: bool = False,
        capture_output: bool = False,
        text: bool = False,
        universal_newlines: bool = False,
        cwd: str | Path | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        **_: Any,
    ) -> subprocess.CompletedProcess[Any]:
        text = text or universal_newlines
        if capture_output:
            stdout = stderr = subprocess.PIPE
        with ExitStack() as stack:
            files: list[IO[bytes]] = []

            def file_for(how: Any, own: int, readable: bool) -> int:
                if how is None:
                    return own
                if how == subprocess.DEVNULL:
                    devnull = stack.enter_context(open(os.devnull, "rb" if readable else "wb"))
                    return devnull.fileno()
                if how == subprocess.PIPE:
                    temp = stack.enter_context(tempfile.TemporaryFile())
                    files.append(temp)
                    return temp.fileno()
                return how if isinstance(how, int) else int(how.fileno())

            if input is not None:
                feed = stack.enter_context(tempfile.TemporaryFile())
                feed.write(input.encode() if isinstance(input, str) else input)
                feed.seek(0)
                in_fd = feed.fileno()
            else:
                in_fd = file_for(stdin, 0, readable=True)
            out_fd = file_for(stdout, 1, readable=False)
            out_file = files[-1] if stdout == subprocess.PIPE else None
            err_fd = out_fd if stderr == subprocess.STDOUT else file_for(stderr, 2, readable=False)
            err_file = files[-1] if stderr == subprocess.PIPE else None
            conn = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET))
            conn.connect(self.address)
            request = {"argv": args, "env": env, "cwd": str(cwd or os.getcwd())}
            socket.send_fds(conn, [json.dumps(request).encode()], [in_fd, out_fd, err_fd])
            pid = json.loads(conn.recv(4096))["pid"]
            conn.settimeout(timeout)
            timed_out = False
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                answer = conn.recv(4096)
            code = os.waitstatus_to_exitcode(json.loads(answer)["status"])

            def read(file: IO[bytes] | None) -> str | bytes | None:
                if file is None:
                    return None
                file.seek(0)
                data = file.read()
                if not text:
                    return data
                encoding = locale.getpreferredencoding(False)
                return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

            out, err = read(out_file), read(err_file)
        if timed_out:
            raise subprocess.TimeoutExpired(args, timeout or 0.0, output=out, stderr=err)
        if check and code:
            raise subprocess.CalledProcessError(code, args, output=out, stderr=err)
        return subprocess.CompletedProcess(args, code, out, err)
