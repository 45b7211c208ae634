"""``reel vault`` as a user runs it: offline on a fresh data dir, then against a running node
(the same commands become API calls); a value never on the command line, bad input exit 2
naming the argument, and no value in any answer or file but the encrypted ones."""

from __future__ import annotations

import json
from pathlib import Path

from events import JournalReader
from events.catalog import VAULT_KINDS
from events.redaction.terms import forms
from tests.processes import REEL
from tests.transports.cli.nodekit import api, reel, running_node

VALUE = "correct-horse-battery-staple-42"
NEXT = "second-horse-battery-staple-43"


def data_args(data: Path) -> tuple[str, str]:
    return ("--data", str(data))


def assert_no_value(data: Path, *values: str) -> None:
    needles = {f.encode() for v in values for f in forms(v)}
    for path in (p for p in data.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        assert not any(n in raw for n in needles), path


def test_set_list_rotate_delete_offline_then_online(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    assert reel("vault", "list", *data_args(data)).stdout.startswith("no secrets")
    made = reel("vault", "set", "gh", "--json", *data_args(data), stdin=VALUE + "\n")
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert (info["name"], info["revision"], info["updated_by"]) == ("gh", 1, "cli")
    assert VALUE not in made.stdout + made.stderr
    (data / "next.txt").write_text(NEXT)
    rotated = reel("vault", "rotate", "gh", "--file", str(data / "next.txt"), *data_args(data))
    assert rotated.returncode == 0 and "revision 2" in rotated.stdout, rotated.stderr
    (data / "next.txt").unlink()
    key = data / "vault.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert_no_value(data, VALUE, NEXT)

    with running_node([str(REEL), "node", *data_args(data)]):
        listed = reel("vault", "list", "--json", *data_args(data))
        assert [(s["name"], s["revision"], s["readable"]) for s in json.loads(listed.stdout)] == [
            ("gh", 2, True)
        ]
        other = reel("vault", "set", "other", *data_args(data), stdin="another-value-9")
        assert other.returncode == 0, other.stderr
        status, body = api(data, "GET", "/v1/vault")
        assert status == 200 and [s["updated_by"] for s in body["items"]] == ["cli", "admin"]
        taken = reel("vault", "set", "gh", *data_args(data), stdin=VALUE)
        assert taken.returncode == 1 and "rotate it" in taken.stderr, taken.stderr
        gone = reel("vault", "delete", "gh", *data_args(data))
        assert gone.returncode == 0, gone.stderr
        absent = reel("vault", "delete", "gh", *data_args(data))
        assert absent.returncode == 2 and "no secret named 'gh'" in absent.stderr

    reader = JournalReader(data / "journal.db")
    try:
        kinds = [row.kind for row in reader.events_of_kinds(VAULT_KINDS)]
        principals = [row.principal for row in reader.events_of_kinds(VAULT_KINDS)]
    finally:
        reader.close()
    assert kinds == [
        "vault.secret_set",
        "vault.secret_rotated",
        "vault.secret_set",
        "vault.secret_deleted",
    ]
    assert principals == ["cli", "cli", "admin", "admin"]
    assert_no_value(data, VALUE, NEXT, "another-value-9")
    assert sorted(p.name for p in (data / "vault").iterdir()) == ["other.1"]


def test_bad_input_exits_2_naming_the_argument_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    cases = [
        (("vault", "set", "gh", VALUE), "VALUE", "never taken on the command line"),
        (("vault", "set", "gh", "--value", VALUE), "--value", "No such option"),
        (("vault", "set", ""), "NAME", "not a valid vault secret name"),
        (("vault", "set", "has space"), "NAME", "not a valid vault secret name"),
        (("vault", "set", "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"), "NAME", "looks like"),
        (("vault", "rotate", "gh/../x"), "NAME", "not a valid vault secret name"),
        (("vault", "set", "gh", "--file", str(tmp_path / "missing")), "--file", "cannot read"),
    ]
    for args, named, why in cases:
        done = reel(*args, *data_args(data), stdin=VALUE)
        assert done.returncode == 2, (args, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert named in line and why in line, (args, line)
        assert VALUE not in line, line
    short = reel("vault", "set", "gh", *data_args(data), stdin="short")
    assert short.returncode == 2 and "at least 8" in short.stderr
    assert reel("vault", "list", "--json", *data_args(data)).stdout.strip() == "[]"
