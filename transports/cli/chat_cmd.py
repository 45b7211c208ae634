"""``reel chat``: over gRPC to a running node (transports/cli/grpc_chat.py), or ``--local``:
drive one run in-process on a data dir no node holds.

Prints the answer as it streams, each tool call, decision and result on its own line, and the
run id; asks at the prompt when an approval is requested (``--approve``/``--deny`` for
scripts). The end of input at the prompt is no answer, never a deny: the approval is left
pending (``reel approvals``, or the next node's console, decides it). Ctrl-C cancels the run.
Exit codes (:mod:`transports.cli.errors`): 0 done, 1 failed or cancelled, 2 usage errors,
4 an approval left pending.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Annotated, get_args

import typer

from transports.cli.data_dir import node_config, resolve
from transports.cli.errors import EXIT_NEGATIVE, EXIT_OK, EXIT_PENDING, CliError
from transports.cli.offline import CLI_PRINCIPAL
from transports.cli.options import DataOption, TokenFileOption
from transports.cli.prompt import NO_ANSWER_HELP, read_line

if TYPE_CHECKING:
    from actors.messages import RunTicket
    from events.catalog import ApprovalRequested
    from projections import GrantOption
    from transports.runtime import Runtime


def chat(
    message: Annotated[
        str | None, typer.Argument(help="The message (none: an interactive session).")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="Run the node in this process.")] = False,
    data: DataOption = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="Session key (created if new).")] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a new session.")] = False,
    approve: Annotated[bool, typer.Option("--approve", help="Allow every approval once.")] = False,
    deny: Annotated[bool, typer.Option("--deny", help="Deny every approval.")] = False,
    posture: Annotated[
        list[str] | None,
        typer.Option(
            "--posture",
            metavar="<tool=posture>",
            help="TOOL=always_allow|ask_each_time|disabled for this session (repeatable; "
            "with --local).",
        ),
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Resume streaming this run id.")
    ] = None,
    after: Annotated[
        int | None, typer.Option("--after", help="With --resume: the last tape_seq seen.")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="The node's gRPC address [default: where the node holding the data dir "
            "listens (its node.json), else the data dir's config and REEL_GRPC_HOST / "
            "REEL_GRPC_PORT, else 127.0.0.1:8471].",
        ),
    ] = None,
    token_file: TokenFileOption = None,
) -> None:
    """Send a message and stream the run: over gRPC to a running node, or --local in-process.

    Exit 0 done, 1 failed or cancelled, 2 usage or connection error, 3 denied by policy, 4 an
    approval left pending (nobody answered at the prompt)."""
    if not local:
        from transports.cli.grpc_chat import chat_over_grpc

        if posture:
            raise typer.BadParameter("--posture needs --local", param_hint="--posture")
        raise typer.Exit(
            chat_over_grpc(
                message,
                session=session,
                key=key,
                new=new,
                approve=approve,
                deny=deny,
                resume=resume,
                after=after,
                address=address,
                token_file=token_file,
                data=data,
            )
        )
    if message is None or resume is not None:
        raise typer.BadParameter("--local needs a message (and cannot --resume)")
    if approve and deny:
        raise typer.BadParameter("give at most one of --approve and --deny")
    if sum((session is not None, key is not None, new)) > 1:
        raise typer.BadParameter("give at most one of --session, --key and --new")
    overrides = [_posture(p) for p in posture or ()]
    from transports.cli import last_chat
    from transports.runtime import open_runtime

    data_dir = resolve(data)
    remembered = None
    if session is None and key is None and not new:
        remembered = session = last_chat.remembered(data_dir)
    # The journal is checked as reel node checks it (JournalTampered), with its config's witness.
    runtime = open_runtime(data_dir, config_path=node_config(data_dir))
    done = False
    try:
        if overrides:
            session = _apply_postures(runtime, session, key, overrides)
            key = None
        code, session_id = _converse(runtime, message, session, key, approve, deny, remembered)
        last_chat.remember(data_dir, session_id)
        done = True
    finally:
        runtime.close(grace_s=0, sign=done)  # a refused command signs nothing
    raise typer.Exit(code)


def _posture(text: str) -> tuple[str, str]:
    from tools.spec import Posture

    tool, sep, value = text.partition("=")
    if not sep or value not in get_args(Posture):
        raise typer.BadParameter(
            f"{text!r}: expected TOOL=always_allow|ask_each_time|disabled", param_hint="--posture"
        )
    return tool, value


def _apply_postures(
    runtime: Runtime, session: str | None, key: str | None, overrides: list[tuple[str, str]]
) -> str:
    """Resolve (or create) the session and set its posture overrides; returns its id."""
    from actors import ActorsError
    from actors.messages import ResolveSession, SetSessionPosture

    try:
        info = runtime.node.ask(
            ResolveSession(
                session_id=session, session_key=key, create=session is None, principal=CLI_PRINCIPAL
            )
        )
        for tool, value in overrides:
            runtime.node.ask(
                SetSessionPosture(
                    session_id=info.session_id,
                    tool=tool,
                    posture=value,  # type: ignore[arg-type]  # checked by _posture
                    principal=CLI_PRINCIPAL,
                )
            )
    except ActorsError as exc:
        raise CliError(str(exc)) from None
    return str(info.session_id)


def _converse(
    runtime: Runtime,
    text: str,
    session: str | None,
    key: str | None,
    approve: bool,
    deny: bool,
    remembered: str | None,
) -> tuple[int, str]:
    """Run ``text`` to its end; the exit code and the run's session. ``remembered``: the last
    chat's session, continued unless the node no longer has it (then a new one)."""
    from actors import ActorsError
    from actors.errors import UnknownSession
    from actors.messages import CancelRun, ResolveApproval, StartRun
    from events.catalog import ApprovalRequested, RunCompleted
    from transports.cli.follow import follow_run
    from transports.cli.render import TapePrinter

    node = runtime.node

    def start(session: str | None) -> RunTicket:
        ticket: RunTicket = node.ask(
            StartRun(
                text=text,
                session_id=session,
                session_key=key,
                create=session is None,
                principal=CLI_PRINCIPAL,
            )
        )
        return ticket

    try:
        if session is not None and session == remembered:
            print(f"continuing session {session} (reel chat --new starts a new one)", flush=True)
            try:
                ticket = start(session)
            except UnknownSession:
                print(f"session {session} is gone: starting a new one", flush=True)
                ticket = start(None)
        else:
            ticket = start(session)
    except ActorsError as exc:
        raise CliError(str(exc)) from None
    print(f"run {ticket.run_id} (session {ticket.session_id})", flush=True)
    printer = TapePrinter(sys.stdout)
    answers = _Answers(runtime)
    status = "failed"
    try:
        for event in follow_run(runtime, ticket.run_id):
            printer.show(event)
            if isinstance(event, ApprovalRequested):
                try:
                    answer = _decide(runtime, answers, event, approve, deny)
                except EOFError:
                    printer.line(
                        f"   approval {event.approval_id} left pending: "
                        + NO_ANSWER_HELP.format(approval_id=event.approval_id)
                        + " (the run goes on when a node starts)"
                    )
                    return EXIT_PENDING, ticket.session_id
                if isinstance(answer, _Decided):
                    printer.line("   (decided elsewhere; no answer needed)")
                    continue  # its resolution (the time-out) is next on the tape
                if isinstance(answer, _Cancel):
                    raise KeyboardInterrupt  # the same cancel as Ctrl-C
                choice, prefix = answer or (None, "")
                try:
                    node.ask(
                        ResolveApproval(
                            approval_id=event.approval_id,
                            decision="deny" if choice is None else "allow",
                            scope=choice.scope if choice else "once",  # type: ignore[arg-type]
                            match=choice.match if choice else "any",  # type: ignore[arg-type]
                            prefix=prefix,
                            principal=CLI_PRINCIPAL,
                        )
                    )
                except ActorsError as exc:
                    printer.line(f"   approval not recorded: {exc}")
            if isinstance(event, RunCompleted):
                status = "done"
    except KeyboardInterrupt:
        printer.line("cancelling...")
        node.ask(CancelRun(run_id=ticket.run_id, principal=CLI_PRINCIPAL))
        for event in follow_run(runtime, ticket.run_id):
            printer.show(event)
        return EXIT_NEGATIVE, ticket.session_id
    return EXIT_OK if status == "done" else EXIT_NEGATIVE, ticket.session_id


class _Decided:
    """The approval was decided while its prompt waited (its time-out): no answer is needed."""


class _Cancel:
    """``/cancel`` was typed at the prompt: cancel the run."""


def _decide(
    runtime: Runtime, answers: _Answers, event: ApprovalRequested, approve: bool, deny: bool
) -> tuple[GrantOption, str] | _Decided | _Cancel | None:
    """The approver's choice and the prefix typed for it ("" unless ``p``) at the terminal
    (the same menu as the gRPC chat), None to deny, :class:`_Decided`, or :class:`_Cancel`.
    EOFError when the input ends: no answer, never a deny."""
    from actors.approvals.grants import options
    from events.catalog import GRANT_SCOPES
    from projections import GrantOption
    from transports.cli.grant_menu import cancels, known, menu, pick

    if approve:
        return GrantOption(scope="once", match="any", covers=""), ""
    if deny:
        return None
    spec = runtime.catalog.spec(event.tool) if event.tool in runtime.catalog else None
    offered = known(
        options(event.tool, spec.args_type if spec else None, GRANT_SCOPES, CLI_PRINCIPAL)
    )
    print(menu(event.tool, offered), flush=True)
    while True:
        answer = answers.read("   choice: ", event.approval_id)
        if answer is None:
            return _Decided()
        if cancels(answer):
            return _Cancel()
        option = pick(answer, offered)
        if option is False:
            return None
        if isinstance(option, GrantOption):
            if option.match != "prefix":
                return option, ""
            prefix = answers.read("   prefix: ", event.approval_id)
            if prefix is None:
                return _Decided()
            if prefix.strip():
                return option, prefix.strip()


class _Answers:
    """Lines typed at the prompt, read on a daemon thread (:func:`read_line`) while the command
    waits for either the line or the approval's resolution (its time-out), so a prompt never
    keeps chat waiting after the run went on. The read a dropped prompt left waiting answers
    the next prompt: a line is never lost, never read twice."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.reading: Future[str] | None = None

    def read(self, prompt: str, approval_id: str) -> str | None:
        """The line typed, or None once the approval is no longer pending; EOFError at the end
        of input (or when the terminal is gone)."""
        if self.reading is None:
            self.reading = Future()
            threading.Thread(
                target=_read_into, args=(prompt, self.reading), name="reel-chat-input", daemon=True
            ).start()
        else:  # the dropped prompt's read still waits: show this prompt
            print(prompt.rstrip(), flush=True)
        reading = self.reading
        woken = threading.Event()
        reading.add_done_callback(lambda _: woken.set())
        unsubscribe = self.runtime.projector.listen(lambda _position: woken.set())
        try:
            while not reading.done():
                record = self.runtime.views.approval(approval_id)
                if record is not None and record.state != "pending":
                    return None
                woken.wait()
                woken.clear()
        finally:
            unsubscribe()
        self.reading = None
        return reading.result()


def _read_into(prompt: str, answer: Future[str]) -> None:
    try:
        answer.set_result(read_line(prompt))
    except BaseException as exc:  # EOFError above all: handed to the prompt
        answer.set_exception(exc)
