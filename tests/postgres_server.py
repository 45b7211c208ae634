"""A throwaway PostgreSQL 15 for one test session: ``initdb --no-sync`` and ``pg_ctl start -w``
in a temp dir on a free loopback port (as the ``postgres`` user through ``runuser`` when the
tests run as root: the server refuses to run as root), ``fsync=on`` (durability is asserted
against it), password authentication on TCP. Stopped (``-m immediate``) at the end, its temp
dir removed by an ``rm`` that outlives the session.

Each test gets a journal of its own in a schema of its own (:meth:`PostgresServer.database`:
the DSN sets ``search_path``), a few milliseconds where a database per test cost a file copy and
its WAL (seconds, and a data dir that took seconds to delete): one server per session keeps the
added time small. Tests skip with a reason only when the binaries are
absent (the Makefile installs ``postgresql-15``).
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
SUPERUSER = "reel"


def available() -> bool:
    """Whether the PostgreSQL 15 binaries are installed."""
    return (BIN / "initdb").exists() and (BIN / "pg_ctl").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A running throwaway server; :meth:`stop` ends it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="reel-pg-"))
        self.password = secrets.token_hex(12)
        self.port = _free_port()
        self._names = itertools.count()
        as_root = os.geteuid() == 0
        self._prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if as_root:
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        self.data = self.root / "data"
        self._run(
            BIN / "initdb",
            "--no-sync",
            "-D",
            self.data,
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--locale=C",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
        )
        self.start()

    def start(self) -> None:
        """Start the server (again) on its port and data dir; returns once it accepts."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c fsync=on -c max_connections=200 -c shared_buffers=32MB"
        )
        self._run(
            BIN / "pg_ctl", "start", "-w", "-D", self.data, "-l", self.root / "log", "-o", options
        )

    def crash(self) -> None:
        """Stop the server as a power cut would (``-m immediate``: no checkpoint, every
        connection dropped; what was committed is in the WAL and recovered at :meth:`start`)."""
        self._run(BIN / "pg_ctl", "stop", "-m", "immediate", "-w", "-D", self.data)

    def _run(self, *argv: str | Path) -> None:
        done = subprocess.run(
            [*self._prefix, *map(str, argv)], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def dsn(self, dbname: str = "postgres", password: str | None = None) -> str:
        """A URI for ``dbname`` as the superuser (with ``password``, a wrong one, say)."""
        secret = self.password if password is None else password
        return f"postgresql://{SUPERUSER}:{secret}@127.0.0.1:{self.port}/{dbname}"

    def database(self) -> str:
        """A DSN whose ``search_path`` is a new empty schema of the session's database."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.dsn()}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        subprocess.run(
            [*self._prefix, str(BIN / "pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data)],
            capture_output=True,
            timeout=60,
        )
        # Deleting the data dir takes seconds on a busy disk: rm finishes after the session.
        subprocess.Popen(["rm", "-rf", str(self.root)], start_new_session=True)
