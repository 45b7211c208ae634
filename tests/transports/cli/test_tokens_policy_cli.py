"""`reel tokens` and `reel policy check --action` as a user runs them, on real data dirs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from events import JournalReader
from tests import processes

REEL = str(Path(sys.executable).with_name("reel"))

APPROVAL_CONTEXT = [
    "approval_id=a1",
    "tool=shell.run",
    "risk=high",
    "run_id=r1",
    "session_id=s1",
    "owner=user:bob",
    "run_principal=user:alice",
    "decision=allow",
    "scope=once",
    "match=any",
]


def reel(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([REEL, *args], capture_output=True, text=True, timeout=60)


def check(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return reel("policy", "check", "--data", str(data), *args)


def context_args(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("--context", pair)]


def test_policy_check_decides_an_api_action_with_the_inputs_of_a_request(tmp_path: Path) -> None:
    args = ["--principal", "user:alice", "--action", "approval.resolve", "--resource", "a1"]
    approver = check(tmp_path, *args, "--role", "approver", *context_args(APPROVAL_CONTEXT))
    assert approver.returncode == 0, approver.stderr
    assert "decision: allow" in approver.stdout and "baseline.approval.resolve" in approver.stdout
    viewer = check(tmp_path, *args, "--role", "viewer", *context_args(APPROVAL_CONTEXT), "--json")
    assert json.loads(viewer.stdout)["outcome"] == "deny"
    # An operator forbid on approval.resolve takes effect here as in the node.
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "self.cedar").write_text(
        '@id("no_self_shell")\n'
        'forbid (principal, action == Action::"approval.resolve", resource)\n'
        'when { context.run_principal == principal && context.tool == "shell.run" };\n'
    )
    own = check(tmp_path, *args, "--role", "approver", *context_args(APPROVAL_CONTEXT), "--json")
    assert json.loads(own.stdout)["policy_ids"] == ["self.no_self_shell"]
    missing = check(tmp_path, *args, "--role", "approver", "--context", "tool=shell.run")
    assert missing.returncode == 2 and "--context" in missing.stderr
    (line,) = missing.stderr.strip().splitlines()
    named = line.split("missing ", 1)[1].split(";")[0].split(" (")[0]
    # every missing key at once, not one per try
    keys = [pair.partition("=")[0] for pair in APPROVAL_CONTEXT]
    assert named.split(", ") == [key for key in keys if key != "tool"], line
    extra = check(
        tmp_path, *args, "--role", "approver", *context_args(APPROVAL_CONTEXT[1:]),
        "--context", "colour=red", "--context", "mood=calm",
    )  # fmt: skip
    assert extra.returncode == 2
    (line,) = extra.stderr.strip().splitlines()
    assert "missing approval_id" in line and "colour, mood" in line, line
    bad_role = check(tmp_path, *args, "--role", "root", *context_args(APPROVAL_CONTEXT))
    assert bad_role.returncode == 2 and "--role" in bad_role.stderr
    neither = check(tmp_path, "--principal", "user:alice")
    assert neither.returncode == 2 and "exactly one of --tool" in neither.stderr


def test_tokens_create_list_revoke_offline(tmp_path: Path) -> None:
    data = str(tmp_path)
    created = reel(
        "tokens", "create", "--principal", "user:alice", "--role", "approver",
        "--expires", "30d", "--note", "on call", "--json", "--data", data,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    made = json.loads(created.stdout)
    assert {"id", "principal", "roles", "token"} <= set(made)
    assert (made["principal"], made["roles"]) == ("user:alice", ["approver"])
    token = made["token"]
    listed = reel("tokens", "list", "--data", data)
    assert made["id"] in listed.stdout and "active" in listed.stdout
    assert token not in listed.stdout
    revoked = reel("tokens", "revoke", made["id"], "--reason", "left", "--data", data)
    assert revoked.returncode == 0, revoked.stderr
    again = reel("tokens", "revoke", made["id"], "--data", data)
    assert again.returncode == 1 and "already revoked" in again.stderr
    (entry,) = json.loads(reel("tokens", "list", "--json", "--data", data).stdout)
    assert entry["state"] == "revoked" and "token" not in entry
    # The journal knows who did it and never holds the token.
    reader = JournalReader.open(tmp_path / "journal.db")
    try:
        stored = reader.events_of_kinds(("token.created", "token.revoked"))
        assert [(s.kind, s.principal) for s in stored] == [
            ("token.created", "cli"),
            ("token.revoked", "cli"),
        ]
    finally:
        reader.close()
    secret = token.removeprefix(f"reel_{made['id']}_").encode()  # the secret may hold "_"
    assert len(secret) == 43
    assert secret not in (tmp_path / "journal.db").read_bytes()
    assert reel("journal", "verify", "--data", data).returncode == 0


def test_tokens_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = str(tmp_path)
    cases = [
        (["--principal", "alice", "--role", "viewer"], "principal"),
        (["--principal", "user:alice", "--role", "root"], "unknown role 'root'"),
        (["--principal", "user:alice", "--role", "viewer", "--expires", "soon"], "--expires"),
    ]
    for args, words in cases:
        out = reel("tokens", "create", *args, "--data", data)
        assert out.returncode == 2 and words in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert reel("tokens", "revoke", "nope", "--data", data).returncode == 2
    empty = reel("tokens", "list", "--data", data)
    assert empty.returncode == 0 and "no tokens" in empty.stdout
