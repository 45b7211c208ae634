"""Connecting to the journal database: one-line errors that never carry the DSN's password.

A DSN is either a URI (``postgresql://user:secret@host:5432/reel``) or key/value pairs
(``host=... password=secret``). :func:`safe_dsn` is what reel ever shows of one; every
psycopg error becomes :class:`events.JournalUnavailable` with the database's own first line, the
password scrubbed from it too (a server may echo what it was sent).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import conninfo

from events.errors import JournalUnavailable, NotAJournal, SchemaTooNew, ShardsFixed
from events.postgres.schema import (
    FUNCTIONS,
    INIT_LOCK,
    INTEGRITY_ROWS,
    LOCK_CLASS,
    NODES,
    SCHEMA_VERSION,
    SINGLETONS,
    create,
)

CONNECT_TIMEOUT_S = 5


def _parts(dsn: str) -> dict[str, Any]:
    try:
        return conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise JournalUnavailable(
            "journal.dsn is not a PostgreSQL connection string (a URI or key=value pairs)"
        ) from None


def safe_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages: ``user@host:port/dbname``."""
    parts = _parts(dsn)
    user = parts.get("user", "")
    host = parts.get("host", "") or "localhost"
    port = parts.get("port", "") or "5432"
    name = parts.get("dbname", "") or user
    return f"{user + '@' if user else ''}{host}:{port}/{name}"


def _scrub(message: str, dsn: str) -> str:
    line = " ".join(str(message).split())
    password = str(_parts(dsn).get("password") or "")
    return line.replace(password, "***") if password else line


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection to the journal database, or :class:`JournalUnavailable` in one line.
    psycopg prepares a statement it runs a few times on it (``shard_append``, the reads): the
    server parses and plans each once per connection, not at every call."""
    with failures(dsn):
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S)


@contextlib.contextmanager
def failures(dsn: str, doing: str = "cannot use") -> Iterator[None]:
    """Turn a psycopg error raised inside into :class:`JournalUnavailable` naming the database
    (never its password)."""
    try:
        yield
    except psycopg.Error as exc:
        raise JournalUnavailable(
            f"{doing} the journal database {safe_dsn(dsn)}: {_scrub(str(exc), dsn)}"
        ) from None


def shard_count(conn: psycopg.Connection[Any], dsn: str) -> int:
    """S, as ``reel journal init`` fixed it; :class:`NotAJournal` when the database has no reel
    journal, :class:`SchemaTooNew` when a newer reel made it."""
    with failures(dsn):
        exists = conn.execute("SELECT to_regclass('cluster') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            raise NotAJournal(
                f"the database {safe_dsn(dsn)} holds no reel journal: create it with "
                f"reel journal init --dsn ..."
            )
        row = conn.execute("SELECT shards, schema_version FROM cluster").fetchone()
    if row is None:
        raise NotAJournal(f"the database {safe_dsn(dsn)} holds an unfinished reel journal")
    shards, version = int(row[0]), int(row[1])
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the journal database {safe_dsn(dsn)} has schema version {version}; this reel "
            f"reads up to {SCHEMA_VERSION} - upgrade reel"
        )
    return shards


def initialise(dsn: str, shards: int) -> bool:
    """Create the journal schema with ``shards`` shard chains in the database ``dsn`` names;
    ``False`` (nothing done) when it is there with that many already. :class:`ShardsFixed`
    when it is there with another count: S never changes after creation."""
    with connect(dsn, autocommit=False) as conn:
        with failures(dsn, "cannot initialise"):
            conn.execute(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, %s)", (INIT_LOCK,))
            exists = conn.execute("SELECT to_regclass('cluster') IS NOT NULL").fetchone()
        if exists and exists[0]:
            have = shard_count(conn, dsn)
            if have == shards:
                _upgrade_locked(conn, dsn)
            conn.commit()
            if have != shards:
                raise ShardsFixed(
                    f"shards: the journal database {safe_dsn(dsn)} was created with {have} "
                    f"shards; the shard count is fixed at creation (asked for {shards})"
                )
            return False
        with failures(dsn, "cannot initialise"):
            create(conn, shards)
            conn.commit()
        return True


def upgrade(dsn: str) -> None:
    """Bring a journal an older reel created up to :data:`SCHEMA_VERSION` in place (``nodes``,
    the liveness check in ``shard_append``, the integrity chain's rows, ``singletons``: each
    statement a no-op where it is there already); nothing when it is current. Run by ``reel
    journal init`` and by every writer before it appends."""
    with connect(dsn, autocommit=False) as conn:
        with failures(dsn, "cannot upgrade"):
            conn.execute(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, %s)", (INIT_LOCK,))
        shard_count(conn, dsn)
        _upgrade_locked(conn, dsn)
        with failures(dsn, "cannot upgrade"):
            conn.commit()


def _upgrade_locked(conn: psycopg.Connection[Any], dsn: str) -> None:
    with failures(dsn, "cannot upgrade"):
        row = conn.execute("SELECT schema_version FROM cluster").fetchone()
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            conn.execute(NODES)
            conn.execute(FUNCTIONS)
            conn.execute(INTEGRITY_ROWS)
            conn.execute(SINGLETONS)  # from 5 to 6
            conn.execute("UPDATE cluster SET schema_version = %s", (SCHEMA_VERSION,))
