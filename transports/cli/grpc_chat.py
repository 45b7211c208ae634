"""``reel chat`` over gRPC: talk to a running node (``--local`` runs one in-process instead).

``reel chat [--session ID | --key K | --new] "message"`` streams the run: output as it arrives,
tool calls, decisions and results on their own lines; an approval request asks at the prompt
(allow once / for the session / always / deny) unless ``--approve``/``--deny`` answer for
scripts. Ctrl-C cancels the run (a second Ctrl-C stops waiting). ``--resume RUN_ID --after N``
follows an existing run from after tape entry N. Without a message it is an interactive session:
each line is a message in the same session, until end of input.

An approval nobody answers at the prompt (the end of input: ``< /dev/null``, a closed pipe, a
cron job; a lost terminal) is never a decision: chat says it leaves the approval pending (for
the console, ``reel approvals`` or its time-out) and exits 4. Answers are read from file
descriptor 0 (:mod:`transports.cli.prompt`), so a prompt closed by a decision made elsewhere
never keeps chat from exiting.

Exit codes (:mod:`transports.cli.errors`): 0 the run finished (done), 1 it failed or was
cancelled, 2 usage or connection error, 3 denied by policy, 4 an approval left pending. The
token comes from ``--token-file``, else ``REEL_TOKEN``, else the data dir's ``admin.token``
(as every client command's); it is never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from actors.approvals.grants import describe
from events.catalog import RunContextAssembled, kind_of
from proto.reel.v1 import (
    ApprovalScope,
    ApprovalsStub,
    ApprovalState,
    Decision,
    GrantMatch,
    ListApprovalsRequest,
    RunState,
    TapeEvent,
    ToolOutcome,
)
from transports.cli import last_chat
from transports.cli.data_dir import resolve
from transports.cli.errors import (
    EXIT_DENIED,
    EXIT_NEGATIVE,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_UNUSABLE,
    CliError,
)
from transports.cli.grant_menu import cancels, known, menu, pick
from transports.cli.node_address import grpc_address, require_published
from transports.cli.node_api import held, node_token
from transports.cli.prompt import NO_ANSWER_HELP, read_line
from transports.cli.render import Terminal, context_line, done_line, shorten
from transports.grpc.client import (
    RunStreamClient,
    auth_metadata,
    open_channel,
)
from transports.grpc.errors import GrpcClientError
from transports.grpc.tape import MATCH_NAMES, MATCHES, SCOPE_NAMES, SCOPES


class GrantOptionView(NamedTuple):
    """A choice as the prompt lists it."""

    scope: str
    match: str
    covers: str


class Choice(NamedTuple):
    """An allow as the approver chose it (a deny is None)."""

    scope: ApprovalScope
    match: GrantMatch = GrantMatch.ANY
    prefix: str = ""


ONCE = Choice(ApprovalScope.ONCE)
OUTCOMES = {
    ToolOutcome.ALLOW: "allow",
    ToolOutcome.DENY: "deny",
    ToolOutcome.APPROVAL_REQUIRED: "approval_required",
}
Ask = Callable[[str], str]
"""Shows a prompt and returns the line typed; EOFError when no answer can come."""


class ChatUsageError(Exception):
    """Bad combination of options (exit 2)."""


class _CancelAsked(Exception):
    """``/cancel`` was typed at an approval prompt."""


class _Forgotten(Exception):
    """The remembered session cannot be continued (gone, or not the token's to use)."""


def chat_over_grpc(
    message: str | None,
    *,
    session: str | None = None,
    key: str | None = None,
    new: bool = False,
    approve: bool = False,
    deny: bool = False,
    resume: str | None = None,
    after: int | None = None,
    address: str | None = None,
    token_file: Path | None = None,
    data: Path | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    ask: Ask = read_line,
) -> int:
    """Run ``reel chat`` against the node at ``address``; returns the exit code."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr
    try:
        _check_usage(message, session, key, new, approve, deny, resume, after)
        data_dir = resolve(data)
        token = node_token(data_dir, token_file)
        where = address or _held_node_address(data_dir)
        chat = _Chat(where, token, stdout, ask, approve=approve, deny=deny)
        if resume is None and session is None and key is None and not new:
            chat.remembered = session = last_chat.remembered(data_dir)
        try:
            return asyncio.run(chat.main(message, session, key, resume, after))
        finally:
            if chat.session_id is not None and resume is None:
                last_chat.remember(data_dir, chat.session_id)
    except (ChatUsageError, GrpcClientError, CliError) as exc:
        print(f"reel: error: {exc}", file=stderr)
        return EXIT_UNUSABLE
    except _Failure as failure:
        print(f"reel: error: {failure}", file=stderr)
        return failure.code


def _held_node_address(data_dir: Path) -> str:
    """Where to chat without ``--address``: the node's published address (``node.json``);
    ``REEL_GRPC_PORT`` / ``REEL_GRPC_HOST`` or the config when no node holds the data dir (a
    node configured elsewhere). A holder that published nothing is starting or has no API, and
    the config's port is not guessed for it: whoever listens there would get this data dir's
    token (docs/operations.md)."""
    require_published(data_dir, "GRPC", "--address", held=lambda: held(data_dir))
    return grpc_address(data_dir)


def _check_usage(
    message: str | None,
    session: str | None,
    key: str | None,
    new: bool,
    approve: bool,
    deny: bool,
    resume: str | None,
    after: int | None,
) -> None:
    if approve and deny:
        raise ChatUsageError("give at most one of --approve and --deny")
    if sum((session is not None, key is not None, new)) > 1:
        raise ChatUsageError("give at most one of --session, --key and --new")
    if resume is not None:
        if message is not None or session is not None or key is not None or new:
            raise ChatUsageError("--resume follows an existing run: give no message or session")
        if after is not None and after < -1:
            raise ChatUsageError("--after must be -1 or more")
    elif after is not None:
        raise ChatUsageError("--after goes with --resume")


class _Failure(Exception):
    """A failure to report: the connection or protocol (exit 2), or the node's policy
    refusing the token's principal (exit 3)."""

    def __init__(self, message: str, code: int = EXIT_UNUSABLE) -> None:
        super().__init__(message)
        self.code = code


class _Chat:
    def __init__(
        self, address: str, token: str, out: TextIO, ask: Ask, *, approve: bool, deny: bool
    ) -> None:
        self.address = address
        self.token = token
        self.printer = _Printer(out)
        self.lines = _Lines(ask, self.printer)
        self.approve = approve
        self.deny = deny
        self.session_id: str | None = None
        self.remembered: str | None = None
        """The last chat's session, continued unless the node refuses it (then a new one)."""
        self.prompts: dict[str, asyncio.Task[None]] = {}
        """Approval prompts on screen, by approval id: a decision made elsewhere (the console,
        another CLI) closes its prompt at once."""
        self.channel: Channel | None = None
        self.answered: tuple[str, str] | None = None
        """The approval last answered here (asked again if the node refuses the answer)."""
        self.pending_ids: set[str] | None = None
        """On --resume: the run's approvals still pending (no prompt for decided ones)."""
        self.position: tuple[str, int] = ("", -1)
        """The run followed and its last tape entry seen (for a resume hint)."""
        self.unanswered: asyncio.Future[None] | None = None
        """Done when a prompt of the run followed ends without an answer: chat stops following
        it, leaving the approvals it asked about pending."""

    async def main(
        self,
        message: str | None,
        session: str | None,
        key: str | None,
        resume: str | None,
        after: int | None,
    ) -> int:
        channel = open_channel(self.address)
        self.channel = channel
        try:
            if resume is not None:
                return await self._run(channel, resume=resume, after=after)
            if message is not None:
                return await self._send(channel, message, session, key)
            code = EXIT_OK
            self.printer.line(
                "one message per line; end of input (Ctrl-D) quits, Ctrl-C (or /cancel at an "
                "approval prompt) cancels the run"
            )
            while True:
                try:
                    line = await self.lines.read("> ")
                except EOFError:
                    return code
                if not line.strip():
                    continue
                code = await self._send(channel, line, self.session_id or session, key)
                if code == EXIT_PENDING:  # the input has ended
                    return code
        finally:
            channel.close()

    async def _send(self, channel: Channel, text: str, session: str | None, key: str | None) -> int:
        """One message as a run: in ``session`` (or by ``key``), and when ``session`` is the one
        remembered from the last chat, in a new session if the node refuses that one."""
        if session is None or session != self.remembered:
            return await self._run(channel, text=text, session=session, key=key)
        self.printer.line(f"continuing session {session} (reel chat --new starts a new one)")
        try:
            return await self._run(channel, text=text, session=session)
        except _Forgotten:
            self.printer.line(
                f"session {session} cannot be continued (gone, or not this token's): "
                "starting a new one"
            )
            self.remembered = None
            return await self._run(channel, text=text)

    async def _run(
        self,
        channel: Channel,
        *,
        text: str | None = None,
        session: str | None = None,
        key: str | None = None,
        resume: str | None = None,
        after: int | None = None,
    ) -> int:
        self.position = (resume or "", after if after is not None else -1)
        self.unanswered = unanswered = asyncio.get_running_loop().create_future()
        try:
            async with RunStreamClient(channel, self.token) as run:
                if resume is not None:
                    await run.resume(resume, after)
                    await self._pending_approvals(channel, run, resume)
                elif session is not None:
                    await run.start(text or "", session_id=session)
                else:
                    await run.start(text or "", session_key=key)
                with self._interrupts(run):
                    return await self._follow(run, unanswered)
        except GRPCError as exc:
            refused = exc.status in (Status.NOT_FOUND, Status.PERMISSION_DENIED)
            accepted = bool(self.position[0])
            if refused and not accepted and session is not None and session == self.remembered:
                raise _Forgotten from None
            code = EXIT_DENIED if exc.status == Status.PERMISSION_DENIED else EXIT_UNUSABLE
            raise _Failure(self._describe(exc, *self.position), code) from None
        except BrokenPipeError:
            raise  # our own stdout went away (``| head``), not the node: see transports.cli.main
        except (OSError, StreamTerminatedError) as exc:
            run_id, last = self.position
            where = f"; resume with --resume {run_id} --after {last}" if run_id else ""
            raise _Failure(
                f"cannot reach the node at {self.address}: {exc}{where} (is it running? "
                "give its address with --address HOST:PORT)"
            ) from None

    async def _follow(self, run: RunStreamClient, unanswered: asyncio.Future[None]) -> int:
        """Follow the run's tape to its end (its outcome's exit code), or until a prompt ends
        without an answer: every approval asked about is then left pending, chat says so, and
        the exit code is :data:`EXIT_PENDING`."""

        async def events() -> int:
            result = EXIT_NEGATIVE
            async for event in run.events():
                if event.tape_seq >= 0:
                    self.position = (event.run_id, event.tape_seq)
                result = await self._handle(run, event, result)
            return result

        follower = asyncio.ensure_future(events())
        try:
            either: set[asyncio.Future[Any]] = {follower, unanswered}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if follower.done():
                return follower.result()
            for approval_id in self.prompts:
                self.printer.line(
                    f"   approval {approval_id} left pending: "
                    + NO_ANSWER_HELP.format(approval_id=approval_id)
                )
            return EXIT_PENDING
        finally:
            follower.cancel()
            for prompt in self.prompts.values():
                prompt.cancel()
            self.prompts.clear()

    async def _pending_approvals(self, channel: Channel, run: RunStreamClient, run_id: str) -> None:
        """A resumed run may wait on an approval requested before ``--after``: ask now. The
        replayed tape may also hold requests decided since: those are never asked again."""
        stub = ApprovalsStub(channel, metadata=auth_metadata(self.token), timeout=30)
        pending = await stub.list(ListApprovalsRequest(state=ApprovalState.PENDING, run_id=run_id))
        self.pending_ids = {a.approval_id for a in pending.approvals}
        for approval in pending.approvals:
            self.printer.line(
                f"   approval {approval.approval_id} pending ({approval.risk} risk): "
                f"{approval.tool} {approval.arguments_json}"
            )
            self._prompt(run, approval.approval_id, approval.tool)

    def _prompt(self, run: RunStreamClient, approval_id: str, tool: str) -> None:
        """Ask about ``approval_id`` without holding up the tape: a decision made elsewhere
        arrives on it and closes the prompt."""
        if approval_id in self.prompts:
            return

        async def ask() -> None:
            try:
                choice = await self._decide(approval_id, tool)
            except EOFError:  # no answer, never a decision: listed still, it is left pending
                if self.unanswered is not None and not self.unanswered.done():
                    self.unanswered.set_result(None)
                return
            except _CancelAsked:  # the run's cancel ends its approval too
                self.prompts.pop(approval_id, None)
                self.printer.line("cancelling...")
                await run.cancel()
                return
            self.prompts.pop(approval_id, None)
            self.answered = (approval_id, tool)
            allowed = choice or ONCE
            await run.approve(
                approval_id,
                allow=choice is not None,
                scope=allowed.scope,
                match=allowed.match,
                prefix=allowed.prefix,
            )

        self.prompts[approval_id] = asyncio.ensure_future(ask())

    def _describe(self, exc: GRPCError, run_id: str, last: int) -> str:
        text = exc.message or exc.status.name
        if exc.status == Status.UNAUTHENTICATED:
            return f"the node refused the token ({text}); check --token-file or --data"
        if exc.status == Status.UNAVAILABLE and run_id:
            return f"{text} (resume with --resume {run_id} --after {last})"
        return f"{exc.status.name}: {text}"

    @contextlib.contextmanager
    def _interrupts(self, run: RunStreamClient) -> Iterator[None]:
        """First Ctrl-C cancels the run (its cancelled status still arrives); the second stops
        waiting."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        hits = 0
        pending: set[asyncio.Task[None]] = set()

        def on_sigint() -> None:
            nonlocal hits
            hits += 1
            if hits == 1:
                self.printer.line("cancelling...")
                cancel = loop.create_task(run.cancel())
                pending.add(cancel)
                cancel.add_done_callback(pending.discard)
            elif task is not None:
                task.cancel()

        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        try:
            yield None
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    async def _handle(self, run: RunStreamClient, event: TapeEvent, outcome: int) -> int:
        self.printer.show(event)
        if event.status is not None:
            status = event.status
            if status.state == RunState.ACCEPTED and status.session_id:
                self.session_id = status.session_id
                self.printer.line(f"run {event.run_id} (session {status.session_id})")
            if status.state == RunState.DONE:
                return EXIT_OK
            if status.state in (RunState.FAILED, RunState.CANCELLED):
                return EXIT_NEGATIVE
        elif event.approval_request is not None:
            request = event.approval_request
            if self.pending_ids is None or request.approval_id in self.pending_ids:
                self._prompt(run, request.approval_id, request.tool)
        elif event.approval_resolution is not None:
            prompt = self.prompts.pop(event.approval_resolution.approval_id, None)
            if prompt is not None and not prompt.done():
                prompt.cancel()
                self.printer.line("   (decided elsewhere; no answer needed)")
        elif (
            event.error is not None
            and event.error.code == Status.INVALID_ARGUMENT.value
            and self.answered is not None
        ):  # the node refused the answer (say, a prefix the tool cannot take): ask again
            approval_id, tool = self.answered
            self.answered = None
            self._prompt(run, approval_id, tool)
        return outcome

    async def _decide(self, approval_id: str, tool: str) -> Choice | None:
        """The approver's answer (None denies): each choice is listed with what it grants (the
        node's own words: :mod:`actors.approvals.grants`); ``p`` then asks for the prefix. ``d`` or
        an empty line denies; the end of input is EOFError, never a deny."""
        if self.approve:
            return ONCE
        if self.deny:
            return None
        options = await self._options(approval_id, tool)
        self.printer.line(menu(tool, options))
        while True:
            answer = await self.lines.read("   choice: ")
            if cancels(answer):
                raise _CancelAsked
            option = pick(answer, options)
            if option is False:
                return None
            if not isinstance(option, GrantOptionView):
                continue
            prefix = ""
            if option.match == "prefix":
                prefix = (await self.lines.read("   prefix: ")).strip()
                if not prefix:
                    continue
            return Choice(SCOPES[option.scope], MATCHES[option.match], prefix)

    async def _options(self, approval_id: str, tool: str) -> list[GrantOptionView]:
        """The pending approval's choices as the node describes them; the basic three (with
        the same descriptions) when the node's views have not shown it yet."""
        if self.channel is not None:
            stub = ApprovalsStub(self.channel, metadata=auth_metadata(self.token), timeout=10)
            with contextlib.suppress(GRPCError, OSError, asyncio.TimeoutError):
                listed = await stub.list(ListApprovalsRequest(state=ApprovalState.PENDING))
                for approval in listed.approvals:
                    if approval.approval_id == approval_id and approval.options:
                        offered = [
                            GrantOptionView(
                                SCOPE_NAMES.get(o.scope, ""), MATCH_NAMES[o.match], o.covers
                            )
                            for o in approval.options
                        ]
                        return known(offered)
        return [
            GrantOptionView(scope, match, describe(tool, scope, match))
            for scope, match in (("once", "any"), ("session", "any"), ("always", "any"))
        ]


class _Lines:
    """Lines from the user, read one at a time on a thread. A prompt that is abandoned (its
    approval was decided elsewhere) leaves its read running: the line the user types next is
    the answer to the next prompt, never lost and never read twice."""

    def __init__(self, ask: Ask, printer: Terminal) -> None:
        self.ask = ask
        self.printer = printer
        self.reading: asyncio.Future[str] | None = None

    async def read(self, prompt: str) -> str:
        if self.reading is None:
            self.reading = self._start(prompt)
        else:  # the abandoned read still waits on the terminal: show the new prompt
            self.printer.line(prompt.rstrip())
        reading = self.reading
        try:
            return await asyncio.shield(reading)
        finally:
            if reading.done():
                self.reading = None

    def _start(self, prompt: str) -> asyncio.Future[str]:
        """Read on a daemon thread: a read nobody waits for must not keep the process alive
        at exit (``asyncio.to_thread`` would join it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()

        def deliver(line: str | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(line or "")

        def work() -> None:
            try:
                line, error = self.ask(prompt), None
            except BaseException as exc:  # EOFError above all: handed to the reader
                line, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(deliver, line, error)

        threading.Thread(target=work, name="reel-chat-input", daemon=True).start()
        return future


class _Printer(Terminal):
    """Prints tape entries received over gRPC."""

    def show(self, event: TapeEvent) -> None:
        if event.output is not None:
            self.stream(event.output.text)
        elif event.tool_proposal is not None:
            p = event.tool_proposal
            self.line(f"-> tool {p.tool} {p.arguments_json}")
        elif event.tool_decision is not None:
            d = event.tool_decision
            ids = f" [{', '.join(d.policy_ids)}]" if d.policy_ids else ""
            grant = f" (cached {d.grant} grant)" if d.grant else ""
            self.line(f"   decision: {OUTCOMES.get(d.outcome, '?')}{grant}{ids}: {d.reason}")
        elif event.approval_request is not None:
            a = event.approval_request
            self.line(f"   approval {a.approval_id} needed ({a.risk} risk): {a.reason}")
        elif event.approval_resolution is not None:
            r = event.approval_resolution
            decision = "allow" if r.decision == Decision.ALLOW else "deny"
            by = f" by {r.decided_by}" if r.decided_by else ""
            self.line(f"   approval: {decision} {SCOPE_NAMES.get(r.scope, 'once')}{by}")
        elif event.tool_result is not None:
            t = event.tool_result
            if t.ok:
                self.line(f"<- {t.tool}: {shorten(t.output)}")
            else:
                self.line(f"<- {t.tool} failed ({t.error_kind}): {t.error}")
        elif event.raw is not None and event.kind == kind_of(RunContextAssembled):
            line = context_line(json.loads(event.raw.event_json))
            if line is not None:
                self.line(line)
        elif event.error is not None:
            self.line(f"   refused: {event.error.message}")
        elif event.status is not None:
            self._status(event)

    def _status(self, event: TapeEvent) -> None:
        status = event.status
        if status is None:
            return
        usage = status.usage
        if status.state == RunState.DONE and usage is not None:
            self.line(
                done_line(
                    status.reason,
                    usage.turns,
                    usage.tool_calls,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                )
            )
        elif status.state == RunState.FAILED:
            self.line(f"run failed ({status.reason}): {status.message}")
        elif status.state == RunState.CANCELLED:
            self.line(f"run cancelled ({status.reason}) by {status.requested_by or 'request'}")
