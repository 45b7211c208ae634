"""``reel doctor``: what is wrong with a data dir and the node on it, each finding with its fix.

The checks, in order: the data dir's owner and modes; the configuration the node would run
with (a key it would refuse, ``REEL_*`` variables overriding the file); the journal's head and
the clock (a clock behind the journal's last event went back); the witness (set, reachable, on
another volume, holding the last signed checkpoint); the sandbox ``shell.run`` needs; the ports
(free for a start, or the running node answering on them with this token); free disk space.

Each finding is ``ok``, ``warn`` (works, but weaker than it should be) or ``fail`` (something
will not work); exit 1 when any check fails. Reads only: it never starts a node, writes the
journal or changes a mode (``reel node`` makes the data dir private when it starts).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec
import typer

from transports.cli.options import DataOption, JsonOption, TokenFileOption

if TYPE_CHECKING:  # the config module is imported when a check needs it
    from transports.config import NodeConfig

Level = Literal["ok", "warn", "fail"]
MIN_FREE_BYTES = 1 << 30
"""Below this free space on the data dir's volume: a warning (the journal grows by appends)."""
CRITICAL_FREE_BYTES = 100 << 20
"""Below this: a failure (an append that cannot be written stops the node)."""
CLOCK_SLACK_S = 1.0
"""How far the journal's last event may stand ahead of this clock before it is a finding."""


class Diagnosis(msgspec.Struct, frozen=True, kw_only=True):
    check: str
    level: Level
    message: str
    fix: str = ""


def _now() -> float:
    """This machine's clock (a seam for the clock check's test)."""
    return time.time()


def doctor(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Check a data dir and the node on it: modes, config, journal and clock, witness, sandbox,
    ports, disk space; each finding with its fix. Exit 1 when any check fails."""
    from transports.cli.data_dir import resolve

    data_dir = resolve(data)
    findings = examine(data_dir, token_file)
    if json:
        print(msgspec.json.encode(findings).decode())
    else:
        for f in findings:
            print(f"{f.level:<5} {f.check:<9} {f.message}")
            if f.fix:
                print(f"{'':<16}fix: {f.fix}")
    if any(f.level == "fail" for f in findings):
        raise typer.Exit(1)


def examine(data_dir: Path, token_file: Path | None) -> list[Diagnosis]:
    """Every finding about ``data_dir`` (the checks of the module docstring, in order)."""
    if not data_dir.is_dir():
        return [
            Diagnosis(
                check="data dir",
                level="fail",
                message=f"no data dir at {data_dir}",
                fix=f"start a node with --data {data_dir} (it creates one), or pass --data",
            )
        ]
    findings = _modes(data_dir)
    config, config_findings = _config(data_dir)
    findings += config_findings
    findings += _journal(data_dir)
    if config is not None:
        findings += _witness(data_dir, config.journal.witness)
        findings += _sandbox(data_dir, config)
        findings += _ports(data_dir, config, token_file)
    findings += _disk(data_dir)
    return findings


def _modes(data_dir: Path) -> list[Diagnosis]:
    info = data_dir.stat()
    found: list[Diagnosis] = []
    if info.st_uid != os.geteuid():
        found.append(
            Diagnosis(
                check="data dir",
                level="fail",
                message=f"{data_dir} belongs to uid {info.st_uid}, not to this user "
                f"(uid {os.geteuid()})",
                fix=f"run reel as the data dir's owner, or chown -R {os.geteuid()} {data_dir}",
            )
        )
    wide = [data_dir] if info.st_mode & 0o077 else []
    wide += [
        p
        for p in sorted(data_dir.iterdir())
        if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o077
    ]
    if wide:
        names = ", ".join(
            f"{p if p == data_dir else p.name} ({stat.filemode(p.stat().st_mode)})" for p in wide
        )
        found.append(
            Diagnosis(
                check="data dir",
                level="warn",
                message=f"open to other users: {names}",
                fix=f"chmod 700 {data_dir} and chmod 600 its files (reel node does it at start)",
            )
        )
    if not found:
        found.append(Diagnosis(check="data dir", level="ok", message=f"{data_dir}: 0700, yours"))
    return found


def _config(data_dir: Path) -> tuple[NodeConfig | None, list[Diagnosis]]:
    from transports.cli.data_dir import node_config
    from transports.config import ConfigError, effective_settings, load_config

    path = node_config(data_dir)
    try:
        config = load_config(path)
        settings = effective_settings(path)
    except ConfigError as exc:
        return None, [
            Diagnosis(
                check="config",
                level="fail",
                message=f"{path}: {exc}",
                fix="correct the key (reel config show lists every key and its default)",
            )
        ]
    overridden = [f"{s.key} by {s.origin}" for s in settings if s.source == "env"]
    shown = path if path.is_file() else f"no {path}: the embedded defaults"
    found = [Diagnosis(check="config", level="ok", message=f"{shown}; every key known")]
    if overridden:
        found.append(
            Diagnosis(
                check="config",
                level="ok",
                message="overridden by this environment: " + ", ".join(overridden),
            )
        )
    return config, found


def _journal(data_dir: Path) -> list[Diagnosis]:
    from events import JournalReader
    from transports.cli.data_dir import journal_path

    path = journal_path(data_dir)
    if not path.exists():
        return [
            Diagnosis(check="journal", level="ok", message="none yet (the first start makes it)")
        ]
    reader = JournalReader.open(path)
    try:
        head = reader.head()
        last = reader.read(max(0, head.position - 1), 1)
    finally:
        reader.close()
    found = [
        Diagnosis(
            check="journal",
            level="ok",
            message=f"head {head.position}; reel journal verify checks every row",
        )
    ]
    if last:
        ahead_s = last[0].recorded_at_ms / 1000 - _now()
        if ahead_s > CLOCK_SLACK_S:
            found.append(
                Diagnosis(
                    check="clock",
                    level="fail",
                    message=f"this clock is {ahead_s:.1f} s behind the journal's last event: "
                    "it went back (time-outs, leases and retries would wait too long)",
                    fix="synchronise the clock (NTP) before starting the node",
                )
            )
        else:
            found.append(Diagnosis(check="clock", level="ok", message="not behind the journal"))
    return found


def _witness(data_dir: Path, witness: str) -> list[Diagnosis]:
    from events.sqlite.reader import JournalReader
    from events.witness import read_notes
    from transports.cli.data_dir import journal_path

    if not witness:
        return [
            Diagnosis(
                check="witness",
                level="warn",
                message="none: whoever holds the data dir could rewrite history and re-sign it",
                fix="set [journal] witness (REEL_JOURNAL_WITNESS) to a file on another volume "
                "(docs/operations.md)",
            )
        ]
    path = Path(witness).expanduser()
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        return [
            Diagnosis(
                check="witness",
                level="fail",
                message=f"{path}: its directory is missing or not writable (the node refuses to "
                "start)",
                fix=f"create {path.parent} writable by this user, or change [journal] witness",
            )
        ]
    found: list[Diagnosis] = []
    if path.parent.stat().st_dev == data_dir.stat().st_dev:
        found.append(
            Diagnosis(
                check="witness",
                level="warn",
                message=f"{path} is on the data dir's volume: one loss takes both",
                fix="put the witness on another volume (a mount of another disk or host)",
            )
        )
    notes = read_notes(path)[0] if path.exists() else []
    journal = journal_path(data_dir)
    checkpoint = None
    if journal.exists():
        reader = JournalReader.open(journal)
        try:
            checkpoint = reader.last_checkpoint()
        finally:
            reader.close()
    witnessed = notes[-1].size if notes else 0
    if checkpoint is not None and witnessed < checkpoint.position:
        found.append(
            Diagnosis(
                check="witness",
                level="warn",
                message=f"{path} holds checkpoints up to {witnessed}, the journal's last signed "
                f"one covers {checkpoint.position}",
                fix="start the node (it writes what the witness lacks), then reel journal "
                f"verify --witness {path}",
            )
        )
    if not found:
        found.append(Diagnosis(check="witness", level="ok", message=f"{path}: current"))
    return found


def _sandbox(data_dir: Path, config: NodeConfig) -> list[Diagnosis]:
    from tools import build_catalog

    catalog = build_catalog(config.tools_config(data_dir))
    shell = next((s for s in catalog.specs() if s.name == "shell.run"), None)
    if shell is None or not shell.unavailable:
        return [
            Diagnosis(check="sandbox", level="ok", message="bubblewrap works: shell.run can run")
        ]
    return [
        Diagnosis(
            check="sandbox",
            level="warn",
            message=f"shell.run cannot run here: {shell.unavailable}",
            fix="install bubblewrap (apt-get install bubblewrap) and allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1); reel tools says why",
        )
    ]


def _ports(data_dir: Path, config: NodeConfig, token_file: Path | None) -> list[Diagnosis]:
    from transports.cli.node_api import call, held

    if held(data_dir):
        status, health = call(data_dir, token_file, "GET", "/v1/whoami")
        if status != 200:
            return [
                Diagnosis(
                    check="node",
                    level="fail",
                    message=f"the node holds the data dir but answers HTTP {status}",
                    fix="reel status; the node's log",
                )
            ]
        who = health.get("principal") if isinstance(health, dict) else "?"
        return [Diagnosis(check="node", level="ok", message=f"running; this token is {who}")]
    found: list[Diagnosis] = []
    for name, host, port in (
        ("http", config.http.host, config.http.port),
        ("grpc", config.grpc.host, config.grpc.port),
    ):
        if port == 0:
            continue
        taken = _taken(host, port)
        if taken:
            found.append(
                Diagnosis(
                    check="ports",
                    level="fail",
                    message=f"{name} {host}:{port}: {taken} (no node runs on this data dir)",
                    fix=f"stop what holds it, or set REEL_{name.upper()}_PORT (0: any free port)",
                )
            )
    if not found:
        ports = [
            f"{n} {p or 'any free port'}"
            for n, p in (("http", config.http.port), ("grpc", config.grpc.port))
        ]
        found.append(
            Diagnosis(
                check="ports", level="ok", message=f"{' and '.join(ports)}: free; no node runs"
            )
        )
    return found


def _taken(host: str, port: int) -> str:
    """Why a node could not listen on ``host:port`` now ("" when it could)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return ""


def _disk(data_dir: Path) -> list[Diagnosis]:
    fs = os.statvfs(data_dir)
    free = fs.f_bavail * fs.f_frsize
    shown = f"{free / (1 << 30):.1f} GiB free on the data dir's volume"
    if free < CRITICAL_FREE_BYTES:
        level: Level = "fail"
    elif free < MIN_FREE_BYTES:
        level = "warn"
    else:
        return [Diagnosis(check="disk", level="ok", message=shown)]
    return [
        Diagnosis(
            check="disk",
            level=level,
            message=shown,
            fix="free space or move the data dir (a full disk stops every append)",
        )
    ]
