"""``reel node`` on the PostgreSQL journal (issue 24 steps 1 and 4): a real node process on a
throwaway PostgreSQL runs a run with a tool call (its session's streams in one shard), a second
node on the same database is refused, the node restarts with a witness and its session
continues; ``reel journal verify --dsn`` walks what it wrote, its super-checkpoints against
the node's pinned key and its witness; ``reel replay`` folds every shard again into the node's
views; the DSN's password is in no log line or output."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
from typing import Any

import psycopg

from events.postgres.homes import shard_of
from events.postgres.verify import verify_database
from events.witness import read_notes
from tests.events.postgres_raw import rewrite_shard
from tests.postgres_server import PostgresServer
from tests.transports.node.test_daemon import assert_one_error_line, reel
from tests.transports.test_node_process import PORTS, ServingNode

DEADLINE_S = 30.0


def finished(node: ServingNode, run_id: str) -> dict[str, Any]:
    """The run's record once it ended (done, failed or cancelled)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        status, run = node.http("GET", f"/v1/runs/{run_id}")
        if status == 200 and run["state"] in ("done", "failed", "cancelled"):
            return dict(run)
        assert time.monotonic() < deadline, f"run {run_id} did not end: {run}"
        time.sleep(0.05)


def test_a_node_on_postgres_runs_restarts_and_its_session_continues(
    postgres: PostgresServer, data_dir: Any
) -> None:
    dsn = postgres.database()
    env = {"REEL_JOURNAL_DSN": dsn}
    init = reel("journal", "init", "--shards", "4", env=env)
    assert init.returncode == 0, init.stderr
    assert "created, 4 shards" in init.stdout
    node_env = {**env, "REEL_JOURNAL_BACKEND": "postgres", "REEL_JOURNAL_SHARDS": "4"}
    said: list[str] = []
    node = ServingNode(data_dir, node_env)
    try:
        status, session = node.http("POST", "/v1/sessions", {})
        assert status == 201, session
        session_id = session["session_id"]
        status, started = node.http(
            "POST",
            f"/v1/sessions/{session_id}/messages",
            {"text": 'look it up\n/tool echo {"text": "from-postgres"}'},
        )
        assert status == 202, started
        first = finished(node, started["run_id"])
        assert first["state"] == "done", first
        assert "from-postgres" in first["answer"]
        other = data_dir.parent / "other"
        other.mkdir(mode=0o700)
        second_node = reel("node", "--data", str(other), env={**node_env, **PORTS})
        assert_one_error_line(second_node, "held for writing by another reel node")
        assert (
            node.wait_for(
                "journal unwitnessed: set [journal] witness (REEL_JOURNAL_WITNESS) to a file "
                "outside the data dir, or whoever can write the database can rewrite a shard "
                "chain and remove the super-checkpoints that sign it"
            )["level"]
            == "warning"
        )
    finally:
        node.process.send_signal(signal.SIGINT)
        assert node.finish() == 0
        said += node.lines + node.stdout
    assert not (data_dir / "journal.db").exists()  # nothing went to SQLite

    witness = data_dir.parent / "witness.notes"  # from the restart on: it catches up first
    node_env["REEL_JOURNAL_WITNESS"] = str(witness)
    node = ServingNode(data_dir, node_env)  # a restart: the node reads it all back
    try:
        status, again = node.http("GET", f"/v1/sessions/{session_id}")
        assert status == 200, again
        status, started = node.http(
            "POST", f"/v1/sessions/{session_id}/messages", {"text": "and now?"}
        )
        assert status == 202, started
        second = finished(node, started["run_id"])
        assert second["state"] == "done", second
        status, runs = node.http("GET", f"/v1/sessions/{session_id}/runs")
        assert status == 200
        assert [r["run_id"] for r in runs["items"]] == [first["run_id"], second["run_id"]]
        status, report = node.http("POST", "/v1/journal/verify", {})
        assert status == 200 and report["ok"], report
        status, page = node.http("GET", "/v1/journal/checkpoints")
        assert status == 200 and page["items"], page  # the first run's, signed at its stop
        assert page["witness"]["path"] == str(witness)
    finally:
        node.process.send_signal(signal.SIGINT)
        assert node.finish() == 0
        said += node.lines + node.stdout

    with psycopg.connect(dsn) as conn:
        kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM events").fetchall()}
        placed = conn.execute(
            "SELECT DISTINCT stream, shard FROM events WHERE stream = %s "
            "OR correlation_id = ANY(%s)",
            (f"session/{session_id}", [first["run_id"], second["run_id"]]),
        ).fetchall()
    assert {"tool.proposed", "tool.completed", "run.completed"} <= kinds, kinds
    # The session's streams, its runs' and their tool calls' live in the session's shard,
    # those the node made before its restart and after (when it had to look them up).
    assert {stream.split("/")[0] for stream, _ in placed} == {"session", "run", "tool"}, placed
    assert {shard for _, shard in placed} == {shard_of(session_id, 4)}, placed
    pubkey = reel("journal", "pubkey", "--data", str(data_dir))
    roster = data_dir.parent / "roster.pem"
    roster.write_text(pubkey.stdout)
    verify = reel("journal", "verify", "--roster", str(roster), "--witness", str(witness), env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "every shard chain intact, anchored by pinned roster + witness" in verify.stdout
    assert len(read_notes(witness)[0]) >= 2  # each run's final super-checkpoint at least
    replayed = reel(
        "replay",
        "--data",
        str(data_dir),
        "--roster",
        str(roster),
        "--witness",
        str(witness),
        env=node_env,
    )  # every shard folded again into a scratch views.db, compared with the node's
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "pinned roster + witness" in replayed.stdout, replayed.stdout
    assert "views identical to a replay from position 0" in replayed.stdout
    rewrite_shard(dsn, shard_of(session_id, 4), b"\x80")  # a whole shard re-hashed
    forged = reel("replay", "--data", str(data_dir), "--roster", str(roster), env=node_env)
    assert forged.returncode == 1, forged.stdout + forged.stderr
    assert "TAMPERED" in forged.stdout and "views identical" not in forged.stdout
    said += [replayed.stdout, replayed.stderr, forged.stdout, forged.stderr]
    shown = reel("config", "show", "--data", str(data_dir), env=node_env)
    assert shown.returncode == 0, shown.stderr
    assert "journal.dsn = " in shown.stdout
    said += [init.stdout, init.stderr, verify.stdout, verify.stderr, shown.stdout, shown.stderr]
    assert not [line for line in said if postgres.password in line]


def test_a_postgres_crash_under_load_loses_nothing_acknowledged(data_dir: Any) -> None:
    """PostgreSQL stopped as by a power cut (``pg_ctl stop -m immediate``) while clients keep
    sending runs to a node on it, then started again: every run the node acknowledged is in
    the journal and ends; what it refused meanwhile was refused with 503 and a JSON body
    naming the journal; it serves new runs once the database is back, and every shard chain
    verifies."""
    server = PostgresServer()  # its own: this test crashes it
    try:
        dsn = server.database()
        env = {"REEL_JOURNAL_DSN": dsn}
        assert reel("journal", "init", "--shards", "4", env=env).returncode == 0
        node = ServingNode(data_dir, {**env, "REEL_JOURNAL_BACKEND": "postgres"})
        acknowledged: list[str] = []
        refused: list[tuple[int, Any]] = []
        stop = threading.Event()

        def client() -> None:
            status, session = node.http("POST", "/v1/sessions", {})
            assert status == 201, session
            while not stop.is_set():
                try:
                    status, body = node.http(
                        "POST", f"/v1/sessions/{session['session_id']}/messages", {"text": "hi"}
                    )
                except (OSError, urllib.error.URLError) as exc:
                    refused.append((0, repr(exc)))
                    continue
                if status != 202:
                    refused.append((status, body))
                    time.sleep(0.05)
                    continue
                acknowledged.append(body["run_id"])
                finished(node, body["run_id"])

        def until(count: int) -> None:
            deadline = time.monotonic() + DEADLINE_S
            while len(acknowledged) < count:
                assert time.monotonic() < deadline, f"{len(acknowledged)} runs acknowledged"
                time.sleep(0.02)

        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        try:
            for thread in clients:
                thread.start()
            until(12)
            server.crash()
            outage = time.monotonic() + DEADLINE_S
            time.sleep(1.0)  # the outage: clients keep sending, until one has been refused
            while not refused and time.monotonic() < outage:  # (a loaded machine's clients
                time.sleep(0.05)  # may all be waiting for their runs' ends for a while)
            before = len(acknowledged)
            server.start()
            until(before + 12)  # served again, without a node restart
        finally:
            stop.set()
            for thread in clients:
                thread.join(DEADLINE_S)
        ended = {run_id: finished(node, run_id)["state"] for run_id in acknowledged}
        assert set(ended.values()) <= {"done", "failed"}, ended
        assert [s for s, _ in refused] and {s for s, _ in refused} <= {503}, refused
        assert all(b["error"]["message"] == "the journal is not available" for _, b in refused)
        node.process.send_signal(signal.SIGINT)
        assert node.finish() == 0
        # The outage is warnings of one line each: no error, no traceback, nothing died.
        assert not [line for line in node.lines if '"level": "error"' in line or '"exc":' in line]
        with psycopg.connect(dsn) as conn:
            stored = {
                r
                for (r,) in conn.execute(
                    "SELECT correlation_id FROM events WHERE kind = 'run.accepted'"
                ).fetchall()
            }
        assert set(acknowledged) <= stored
        report = verify_database(dsn)
        assert report.ok, report.fault
    finally:
        server.stop()
