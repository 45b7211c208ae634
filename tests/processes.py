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
import contextlib
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

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
    "TZ",
    "LD_",
    "FAKETIME",
    "GLIBC_",
    "MALLOC_",
    "OPENSSL_",
    "SSL_",
    "TERMINAL_WIDTH",
    "FORCE_COLOR",
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TYPER_",
    "_TYPER_",
)
"""Environment variables (names or prefixes) read when a process starts (the interpreter's, the
locale, the time zone, the dynamic loader's, libc's, libfaketime's) or a module is imported
(OpenSSL's CA store for aiohttp's TLS contexts, typer's terminal switches): a command line whose
values differ from the forking process's runs as a plain process (:func:`run`)."""

ALWAYS_SPAWN = "TESTS_NO_ZYGOTE"
"""Set (to anything) in the suite's environment, :func:`run` starts every command line as a
plain process: the fork's shortcut checked against the real thing (a command that leans on a
module only the zygote imported would fail here)."""

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
    :mod:`tests.zygote` when its arguments and environment allow (the same exit code, output,
    :class:`subprocess.TimeoutExpired` and :class:`subprocess.CalledProcessError`; the child
    killed if the wait ends any other way), any other as ``subprocess.run``."""
    args = [str(a) for a in argv]
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    if (
        os.environ.get(ALWAYS_SPAWN)
        or args[0] != str(REEL)
        or not _forkable(kwargs)
        or not _same_imports(env)
    ):
        return subprocess.run(args, **kwargs)
    kwargs.pop("env", None)
    return _Forks.get().run(args, env, **kwargs)


def _forkable(kwargs: Mapping[str, Any]) -> bool:
    """Whether the fork does with these arguments what ``subprocess.run`` would; a combination
    ``subprocess.run`` refuses (``input`` with ``stdin``, ``capture_output`` with ``stdout``, a
    ``str`` input to a bytes process, a ``cwd`` that is no directory...) goes to it, to be
    refused in its own words."""
    text = kwargs.get("text") or kwargs.get("universal_newlines")
    given = kwargs.get("input")
    timeout = kwargs.get("timeout")
    cwd = kwargs.get("cwd")
    return (
        kwargs.keys() <= _FORKED_KWARGS
        and not (given is not None and kwargs.get("stdin") is not None)
        and not (
            kwargs.get("capture_output")
            and (kwargs.get("stdout"), kwargs.get("stderr")) != (None, None)
        )
        and not (given is not None and isinstance(given, str) != bool(text))
        and not (timeout is not None and timeout <= 0)
        and (cwd is None or os.path.isdir(cwd))
    )


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
    ) -> subprocess.CompletedProcess[Any]:
        """As ``subprocess.run``: captured output read from pipes until every holder closed
        them (a process the command left behind holding one keeps the call waiting, as it
        would), the exit status told by the zygote."""
        text = text or universal_newlines
        if capture_output:
            stdout = stderr = subprocess.PIPE
        deadline = None if timeout is None else time.monotonic() + timeout
        with ExitStack() as stack:
            theirs: list[int] = []  # the child's ends, closed here once it has them

            @stack.callback
            def close_theirs() -> None:
                for fd in theirs:
                    os.close(fd)

            def opened(path: str, flags: int) -> int:
                fd = os.open(path, flags)
                theirs.append(fd)
                return fd

            def end(how: Any, inherited: int, reading: bool) -> tuple[int, int | None]:
                """The child's fd for one stream, and this side's read end if captured."""
                if how is None:
                    return inherited, None
                if how == subprocess.DEVNULL:
                    return opened(os.devnull, os.O_RDONLY if reading else os.O_WRONLY), None
                if how == subprocess.PIPE:
                    read, write = os.pipe()
                    if reading:  # nothing to write: the child reads its end of file
                        os.close(write)
                        theirs.append(read)
                        return read, None
                    stack.callback(os.close, read)
                    theirs.append(write)
                    return write, read
                return (how if isinstance(how, int) else int(how.fileno())), None

            if input is not None:
                feed = stack.enter_context(tempfile.TemporaryFile())
                feed.write(input.encode() if isinstance(input, str) else input)
                feed.seek(0)
                in_fd = feed.fileno()
            else:
                in_fd, _ = end(stdin, 0, reading=True)
            out_fd, out_read = end(stdout, 1, reading=False)
            if stderr == subprocess.STDOUT:
                err_fd, err_read = out_fd, None
            else:
                err_fd, err_read = end(stderr, 2, reading=False)
            conn = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET))
            conn.connect(self.address)
            request = {
                "argv": args,
                "env": env,
                "cwd": os.path.abspath(cwd or os.getcwd()),
                "umask": _umask(),
            }
            socket.send_fds(conn, [json.dumps(request).encode()], [in_fd, out_fd, err_fd])
            for fd in theirs:
                os.close(fd)
            theirs.clear()
            pid = self._answer(conn, "pid")
            output = {fd: bytearray() for fd in (out_read, err_read) if fd is not None}
            try:
                status = self._collect(conn, output, deadline)
            except BaseException:  # as subprocess.run: killed, and reaped before it raises
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    conn.settimeout(10)
                    conn.recv(4096)
                raise
            finally:
                captured = [
                    None if fd is None else _decoded(bytes(output[fd]), text)
                    for fd in (out_read, err_read)
                ]
            if status is None:  # the deadline passed: killed, then reaped
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._answer(conn, "status")
                raise subprocess.TimeoutExpired(
                    args,
                    timeout or 0.0,
                    output=None if out_read is None else bytes(output[out_read]),
                    stderr=None if err_read is None else bytes(output[err_read]),
                )
        code = os.waitstatus_to_exitcode(status)
        out, err = captured
        if check and code:
            raise subprocess.CalledProcessError(code, args, output=out, stderr=err)
        return subprocess.CompletedProcess(args, code, out, err)

    @staticmethod
    def _answer(conn: socket.socket, field: str) -> int:
        """The zygote's next answer's ``field``; an ended zygote is an error, not a hang."""
        conn.settimeout(None)
        message = conn.recv(4096)
        if not message:
            raise RuntimeError(f"tests/zygote.py ended before it told the {field}")
        return int(json.loads(message)[field])

    @staticmethod
    def _collect(
        conn: socket.socket, output: dict[int, bytearray], deadline: float | None
    ) -> int | None:
        """Read the captured streams to their ends and the child's status; None when the
        deadline passed first."""
        status: int | None = None
        with selectors.DefaultSelector() as selector:
            selector.register(conn, selectors.EVENT_READ)
            for fd in output:
                selector.register(fd, selectors.EVENT_READ)
            while len(selector.get_map()) > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                for key, _ in selector.select(left):
                    if key.fileobj is conn:
                        selector.unregister(conn)
                        status = _Forks._answer(conn, "status")
                        continue
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        output[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
        assert status is not None
        return status


def _umask() -> int:
    """This process's umask, read without setting it (``os.umask`` would, for a moment, for
    every thread)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("no Umask line in /proc/self/status")


def _decoded(data: bytes, text: bool) -> str | bytes:
    """Captured bytes as ``subprocess.run`` hands them back: text in the locale's encoding with
    universal newlines, or the bytes."""
    if not text:
        return data
    decoded = data.decode(locale.getpreferredencoding(False))
    return decoded.replace("\r\n", "\n").replace("\r", "\n")
