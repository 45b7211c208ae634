"""Opening the node's journal: the SQLite file of a data dir, or the PostgreSQL database of
``[journal] dsn``, checked the node's way before anything is appended, and the API's walk of it.

Its own module so that what opens only a journal (every offline command,
:mod:`transports.cli.offline`) does not import the whole composition (:mod:`transports.runtime`:
a third of a second of a command's start)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from events import (
    Journal,
    JournalReader,
    JournalTampered,
    NodeKey,
    VerifyReport,
    Witness,
    verify,
)
from events.port import NodeJournal
from transports.config import ConfigError, NodeConfig

if TYPE_CHECKING:
    from transports.cluster.member import ClusterMember


def open_journal(
    data_dir: Path,
    cfg: NodeConfig,
    on_tampered: Callable[[JournalTampered], None] | None = None,
    cluster: ClusterMember | None = None,
) -> NodeJournal:
    """The data dir's journal opened for writing the node's way: its key, its witness
    (``[journal] witness``), the start-up check (``JournalTampered`` before anything is written
    or signed), then the walk over every row. With ``on_tampered`` (the node) the walk runs on a
    thread once the node serves (``journal.start_verifying()``, after the ready line: the walk
    would slow the rest of the start-up), nothing is signed until it passes and ``on_tampered``
    hears when it fails; without it (an offline command) the walk ends before this returns and a
    failure is the same ``JournalTampered``: nothing is appended to a journal the node refuses.

    ``[journal] backend = "postgres"``: the database ``dsn`` names instead (:func:`open_postgres`;
    with ``cluster``, as one node of several).
    """
    if cfg.journal.backend == "postgres":
        return open_postgres(cfg, data_dir, cluster)
    witness = (
        Witness.open(Path(cfg.journal.witness), data_dir=data_dir) if cfg.journal.witness else None
    )
    try:
        journal = Journal(
            data_dir / "journal.db",
            node_key=NodeKey.load_or_create(data_dir / "node.key"),
            witness=witness,
            on_tampered=on_tampered or _told_by_wait,
            walk_when_told=on_tampered is not None,
            synchronous=cfg.journal.synchronous,
            checkpoint_every_events=cfg.journal.checkpoint_every_events,
            checkpoint_every_s=cfg.journal.checkpoint_every_s,
        )
    except BaseException:
        if witness is not None:
            witness.close(timeout=0)
        raise
    if on_tampered is None:
        try:
            journal.wait_verified()
        except BaseException:
            journal.close(checkpoint=False)  # tampered, or interrupted before the walk ended
            raise
    return journal


def open_postgres(
    cfg: NodeConfig, data_dir: Path | None = None, cluster: ClusterMember | None = None
) -> NodeJournal:
    """The PostgreSQL journal of ``[journal] dsn``. Given the node's ``data_dir``, it signs
    super-checkpoints with its ``node.key`` and appends them to the ``[journal] witness`` (as
    on SQLite), and opening it verifies everything first, the witness included; without one
    (a test) it signs nothing and every shard chain is walked here. A fault is
    ``JournalTampered``: nothing is appended to it. psycopg is imported only here. A ``shards``
    that is not the database's is a ``ConfigError`` naming it. With ``cluster`` the node first
    registers and starts its leases (it appends only to the shards they give it)."""
    section = cfg.journal
    witness: Witness | None = None
    if data_dir is not None and section.witness:
        witness = Witness.open(Path(section.witness), data_dir=data_dir)
    try:
        if not section.dsn:
            raise ConfigError(
                "config key journal.dsn: backend postgres needs a dsn (REEL_JOURNAL_DSN)"
            )
        try:
            from events.postgres.database import connect, shard_count
            from events.postgres.journal import PostgresJournal
            from events.postgres.verify import refusal, verify_database
        except ImportError:
            raise ConfigError(
                "config key journal.backend: postgres needs the postgres extra "
                "(pip install 'reel[postgres]')"
            ) from None
        if section.shards:  # before the journal: opening it with a key appends (the roster)
            with connect(section.dsn) as conn:
                shards = shard_count(conn, section.dsn)
            if section.shards != shards:
                raise ConfigError(
                    f"config key journal.shards: {section.shards}, but the journal database "
                    f"was created with {shards} (the count is fixed at creation)"
                )
        key = NodeKey.load_or_create(data_dir / "node.key") if data_dir is not None else None
        if cluster is not None:
            assert key is not None, "a cluster node has a data dir"
            journal = PostgresJournal(
                section.dsn,
                node=cluster.config.node,
                leases=cluster.join(section.dsn, key),
                node_key=key,
                witness=witness,
            )
        else:
            journal = PostgresJournal(  # the writer lock first
                section.dsn, node=os.uname().nodename, node_key=key, witness=witness
            )
    except BaseException:
        if witness is not None:
            witness.close(timeout=0)
        raise
    try:
        fault = verify_database(section.dsn).fault if key is None else None  # else: it did
    except BaseException:
        journal.close(checkpoint=False)
        raise
    if fault is not None:
        journal.close(checkpoint=False)
        raise refusal(fault)
    return journal


def verify_own(journal: NodeJournal) -> VerifyReport:
    """Walk every row of the node's own journal against its own key and witness (the API's
    journal verify): the SQLite walk, or every shard chain of the PostgreSQL journal."""
    if isinstance(journal, JournalReader):
        key = journal.node_key.public_key if journal.node_key is not None else None
        notes = journal.witness.notes() if journal.witness is not None else None
        return verify(journal, trusted_public_key=key, key_source="node", witness=notes)
    from events.postgres.journal import PostgresJournal
    from events.postgres.verify import verify_database

    assert isinstance(journal, PostgresJournal)
    notes = journal.witness.notes() if journal.witness is not None else None
    return verify_database(journal.dsn, witness=notes)


def _told_by_wait(_error: JournalTampered) -> None:
    """``open_journal`` without ``on_tampered``: ``wait_verified`` raises the error itself."""
