"""``reel chat`` over gRPC (transports.cli.grpc_chat) against a real node."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.messages import ResolveApproval
from tests.transports.grpc.conftest import SHELL_ECHO, GrpcNode, converse, run
from transports.cli.grpc_chat import chat_over_grpc


def chat(
    node: GrpcNode, message: str | None, answers: Iterator[str] | None = None, **options: Any
) -> tuple[int, str, str]:
    answers = answers if answers is not None else iter(())
    out, err = io.StringIO(), io.StringIO()
    if not {"session", "key", "resume"} & options.keys():
        options.setdefault("new", True)  # each test its own session unless it says otherwise

    def ask(prompt: str) -> str:
        out.write(prompt)
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    code = chat_over_grpc(
        message,
        address=node.address,
        data=node.data_dir,
        out=out,
        err=err,
        ask=ask,
        **options,
    )
    return code, out.getvalue(), err.getvalue()


def test_a_message_streams_to_the_terminal_and_exits_0(node: GrpcNode) -> None:
    code, out, err = chat(node, "hello terminal")
    assert code == 0, err
    assert "hello terminal" in out
    assert out.splitlines()[0].startswith("run ") and "(session " in out
    assert "run done (final_answer" in out


def test_an_approval_is_asked_at_the_prompt(node: GrpcNode) -> None:
    code, out, err = chat(node, SHELL_ECHO, iter(["s"]))
    assert code == 0, err
    assert "-> tool shell.run" in out
    assert "decision: approval_required" in out
    assert "allow shell.run?" in out
    assert "[s] session: shell.run with any arguments in this session, until it resets" in out
    assert "[e] session: shell.run with these exact arguments in this session" in out
    assert "[p] session: shell.run with arguments whose argv starts with a prefix" in out
    assert "[a] always: shell.run with any arguments for admin in every session" in out
    assert "approval: allow session" in out
    assert "<- shell.run:" in out and "yo" in out


def test_a_prefix_grant_from_the_prompt_and_a_refused_prefix_is_asked_again(
    node: GrpcNode,
) -> None:
    # "echo 'x" cannot be split into words: the node refuses it and the prompt comes back.
    code, out, err = chat(node, SHELL_ECHO, iter(["p", "echo 'x", "p", "echo"]))
    assert code == 0, err
    assert out.count("allow shell.run?") == 2
    assert "refused: " in out and "prefix" in out
    assert "approval: allow session by admin" in out
    assert "<- shell.run:" in out


def test_deny_for_scripts_makes_the_tool_fail_and_the_run_still_ends(node: GrpcNode) -> None:
    code, out, _ = chat(node, SHELL_ECHO, deny=True)
    assert "approval: deny" in out
    assert "<- shell.run failed" in out
    assert code in (0, 1)


def test_a_failed_run_exits_1(node: GrpcNode) -> None:
    code, out, _ = chat(node, "/fail boom")
    assert code == 1
    assert "run failed" in out


def test_resume_prints_the_rest_of_a_run(node: GrpcNode) -> None:
    events = run(converse(node, "resume me please"))
    code, out, err = chat(node, None, resume=events[0].run_id, after=2)
    assert code == 0, err
    assert "run done" in out


def test_interactive_session_keeps_one_session(node: GrpcNode) -> None:
    code, out, err = chat(node, None, iter(["first line", "second line"]))
    assert code == 0, err
    assert "first line" in out and "second line" in out
    sessions = {line.split("(session ")[1] for line in out.splitlines() if "(session " in line}
    assert len(sessions) == 1


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"approve": True, "deny": True}, "--approve and --deny"),
        ({"session": "x", "new": True}, "--session, --key and --new"),
        ({"after": 3}, "--after goes with --resume"),
    ],
)
def test_usage_errors_exit_2(node: GrpcNode, options: dict[str, Any], problem: str) -> None:
    code, _, err = chat(node, "hi", **options)
    assert code == 2 and problem in err


def test_a_wrong_token_or_no_node_exits_2(node: GrpcNode, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("not-the-token\n")
    code, _, err = chat(node, "hi", token_file=token)
    assert code == 2 and "refused the token" in err and "not-the-token" not in err
    out = io.StringIO()
    closed = chat_over_grpc("hi", address="127.0.0.1:1", data=node.data_dir, out=out, err=out)
    assert closed == 2 and "cannot reach the node at 127.0.0.1:1" in out.getvalue()


def test_reel_token_is_the_token_chat_sends(
    node: GrpcNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like every client command: ``--token-file``, else ``REEL_TOKEN``, else admin.token (it
    used to skip ``REEL_TOKEN`` and speak as the admin)."""
    monkeypatch.setenv("REEL_TOKEN", "not-the-token")
    code, _, err = chat(node, "hi")
    assert code == 2 and "refused the token" in err and "not-the-token" not in err
    monkeypatch.setenv("REEL_TOKEN", (node.data_dir / "admin.token").read_text().strip())
    assert chat(node, "hi")[0] == 0


def test_ctrl_c_cancels_the_run_and_exits_1(node: GrpcNode) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from transports.cli.grpc_chat import chat_over_grpc
        sys.exit(chat_over_grpc("/sleep 20000\\nslow", address={node.address!r},
                                data=Path({str(node.data_dir)!r}), new=True))
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("run "), first
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 1, err
    assert "cancelling..." in out and "run cancelled" in out


class ClosedPipe(io.StringIO):
    """stdout of ``reel chat ... | head -1`` once head has exited."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stdout_is_not_reported_as_an_unreachable_node(node: GrpcNode) -> None:
    err = io.StringIO()
    with pytest.raises(BrokenPipeError):
        chat_over_grpc("hi", address=node.address, data=node.data_dir, out=ClosedPipe(), err=err)
    assert "cannot reach the node" not in err.getvalue()


def _resolve_when_pending(
    node: GrpcNode, principal: str = "operator", after: threading.Event | None = None
) -> threading.Thread:
    """Another operator (here: the node's own API, as the console would) allows the first
    pending approval as soon as there is one (and ``after`` is set, when given)."""

    def decide() -> None:
        registry = node.runtime.node.services.registry
        deadline = time.monotonic() + 20
        if after is not None:
            after.wait(20)
        while time.monotonic() < deadline:
            pending = registry.pending_approvals()
            if pending:
                node.runtime.node.ask(
                    ResolveApproval(approval_id=pending[0], decision="allow", principal=principal)
                )
                return
            time.sleep(0.02)

    thread = threading.Thread(target=decide, daemon=True)
    thread.start()
    return thread


def test_a_decision_made_elsewhere_closes_the_prompt_and_the_run_goes_on(node: GrpcNode) -> None:
    """The user sits at the prompt without answering; someone else decides: the chat prints
    the decision, drops its prompt and finishes the run (exit 0) without a keystroke."""
    asked = threading.Event()
    never = threading.Event()
    out, err = io.StringIO(), io.StringIO()

    def ask(prompt: str) -> str:
        out.write(prompt)
        asked.set()
        never.wait(60)  # a person who never answers
        raise EOFError

    # decided once the user sits at the prompt, which is what this test is about
    decider = _resolve_when_pending(node, principal="user:carol", after=asked)
    started = time.monotonic()
    code = chat_over_grpc(
        SHELL_ECHO, address=node.address, data=node.data_dir, out=out, err=err, ask=ask, new=True
    )
    decider.join(5)
    text = out.getvalue()
    assert code == 0, err.getvalue() + text
    assert asked.is_set()
    assert "approval: allow once by user:carol" in text
    assert "decided elsewhere" in text
    assert "<- shell.run:" in text and "run done" in text
    assert time.monotonic() - started < 20


def test_resume_never_asks_again_about_a_decided_approval(node: GrpcNode) -> None:
    code, out, err = chat(node, SHELL_ECHO, iter(["o"]))
    assert code == 0, err
    run_id = out.splitlines()[0].split()[1]

    def ask(prompt: str) -> str:
        raise AssertionError(f"asked again: {prompt}")

    again = io.StringIO()
    code = chat_over_grpc(
        None, resume=run_id, after=-1, address=node.address, data=node.data_dir,
        out=again, err=again, ask=ask,
    )  # fmt: skip
    assert code == 0, again.getvalue()
    assert "approval: allow once" in again.getvalue() and "allow shell.run?" not in again.getvalue()


def test_the_address_comes_from_the_data_dirs_config_and_env(
    node: GrpcNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REEL_GRPC_PORT", str(node.server.port))
    out = io.StringIO()
    code = chat_over_grpc("via env", data=node.data_dir, out=out, err=out)
    assert code == 0, out.getvalue()
    monkeypatch.setenv("REEL_GRPC_PORT", "1")
    code = chat_over_grpc("nowhere", data=node.data_dir, out=out, err=out)
    assert code == 2 and "127.0.0.1:1" in out.getvalue() and "--address" in out.getvalue()


def test_chat_continues_the_last_chats_session_unless_new(node: GrpcNode) -> None:
    (node.data_dir / "chat.session").unlink(missing_ok=True)
    code, first, _ = chat(node, "first", new=False)
    assert code == 0 and "continuing" not in first
    session = re.search(r"\(session (\w+)\)", first)
    assert session is not None
    code, second, _ = chat(node, "second", new=False)
    assert code == 0
    assert second.startswith(
        f"continuing session {session[1]} (reel chat --new starts a new one)\n"
    )
    assert f"(session {session[1]})" in second
    code, fresh, _ = chat(node, "third", new=True)
    assert code == 0 and "continuing" not in fresh and f"(session {session[1]})" not in fresh
    assert (node.data_dir / "chat.session").stat().st_mode & 0o777 == 0o600


def test_a_remembered_session_the_node_does_not_have_starts_a_new_one(node: GrpcNode) -> None:
    gone = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    (node.data_dir / "chat.session").write_text(gone + "\n")
    code, out, err = chat(node, "hello", new=False)
    assert code == 0, err
    assert f"session {gone} cannot be continued (gone, or not this token's): starting a new " in out
    assert "run done" in out
    assert (node.data_dir / "chat.session").read_text().strip() != gone


def test_cancel_at_the_approval_prompt_cancels_the_run(node: GrpcNode) -> None:
    code, out, err = chat(node, SHELL_ECHO, iter(["/cancel"]))
    assert code == 1, err
    assert "/cancel: cancel the run" in out and "cancelling..." in out
    assert "run cancelled (" in out
