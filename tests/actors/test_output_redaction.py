"""A model's streamed output reaches the journal redacted as one text, however it is chunked.

Through the real path (node, session, RunActor, coalescer, journal on disk): a provider streams
each corpus secret cut at every split point (and one character at a time); afterwards the
journal file is read as bytes and must hold none of the secrets. The final answer is the
chunks joined, and both are exactly the whole text redacted."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import pytest

from actors.provider import ProviderEvent, ProviderRequest, TextDelta, TurnEnd, Usage
from events.catalog import RunCompleted, RunOutput
from events.redaction.redact import redact_text
from tests.actors.conftest import MakeNode
from tests.events.redaction_corpus import SECRETS, Secret
from transports.models import DeterministicProvider

PLAY = "play script "
PAUSE_S = 0.15
"""A piece ``None`` in a script: the model pauses this long (three of the run's 50 ms flush
ticks, each of which releases what the redactor can release)."""


class ChunkedProvider(DeterministicProvider):
    """The deterministic provider, except that ``play script N`` streams script N: the text
    pieces it was given, one delta each (a model may stream any sizes, down to one character);
    a piece ``None`` is a pause of :data:`PAUSE_S`."""

    def __init__(self) -> None:
        super().__init__(name="chunked")
        self.scripts: list[Sequence[str | None]] = []

    def add(self, pieces: Sequence[str | None]) -> str:
        self.scripts.append(pieces)
        return f"{PLAY}{len(self.scripts) - 1}"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        content = request.messages[-1].content
        if not content.startswith(PLAY):
            async for item in super().stream(request):
                yield item
            return
        for piece in self.scripts[int(content.removeprefix(PLAY))]:
            if piece is None:
                await asyncio.sleep(PAUSE_S)
            else:
                yield TextDelta(text=piece)
        yield Usage(prompt_tokens=1, completion_tokens=1)
        yield TurnEnd(finish_reason="stop")


def splits(secret: Secret, every: bool = True) -> list[list[str]]:
    """The text cut once at every point, and one character at a time. Not ``every``: only the
    cuts where a detector's verdict is made (the text's ends, one character either side of each
    value's start and end, its middle) and every eleventh other point, a fifth of the cases."""
    text = secret.text
    cuts = set(range(len(text) + 1))
    if not every:
        near = {0, len(text)}
        for value in secret.values:
            at = text.find(value)
            near |= {at + d for d in (-1, 0, 1)} | {at + len(value) + d for d in (-1, 0, 1)}
            near.add(at + len(value) // 2)
        cuts = {k for k in cuts if k in near or k % 11 == len(text) % 11}
    return [[text[:k], text[k:]] for k in sorted(cuts)] + [list(text)]


def journal_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.iterdir() if p.name.startswith("journal.db"))


def assert_no_corpus_value_in_the_journal(root: Path) -> None:
    raw = journal_bytes(root)
    for secret in SECRETS:
        for value in secret.values:
            assert value.encode() not in raw, f"{secret.shape}: {value!r} reached the journal"


def play_all(make_node: MakeNode, cases: Sequence[tuple[Secret, Sequence[str | None]]]) -> Path:
    """Run every case through one node (all at once), check each run, close the node; returns
    the node's directory."""
    provider = ChunkedProvider()
    kit = make_node(provider=provider)
    tickets = [(secret, kit.start_run(provider.add(pieces))) for secret, pieces in cases]
    for secret, ticket in tickets:
        end = kit.wait_for_end(ticket.run_id, timeout=60)
        assert isinstance(end, RunCompleted), end
        chunks = [e.text for e in kit.events(ticket.run_id, "run.output")]
        want, count = redact_text(secret.text)
        assert end.answer == "".join(chunks) == want
        assert sum(e.redacted for e in kit.events(ticket.run_id, "run.output")) == count
        assert all(isinstance(e, RunOutput) for e in kit.events(ticket.run_id, "run.output"))
    kit.close()
    return kit.root


def assert_no_split_point_lets_a_secret_in(make_node: MakeNode, every: bool) -> None:
    cases = [(secret, pieces) for secret in SECRETS for pieces in splits(secret, every)]
    root = play_all(make_node, cases)
    assert_no_corpus_value_in_the_journal(root)


def test_no_split_point_near_a_secret_lets_it_into_the_journal(make_node: MakeNode) -> None:
    """Every corpus secret, cut where a verdict is made and one character at a time."""
    assert_no_split_point_lets_a_secret_in(make_node, every=False)


def test_a_pause_at_any_space_after_prose_lets_no_secret_in(make_node: MakeNode) -> None:
    """A paragraph, then each corpus secret cut after each of its spaces with the model pausing
    there: the run's flush ticks release text at the cut (a short text alone is held whole to
    the end, so the cases above release nothing before it). ``... kata `` then ``sandi: value``
    leaked so until the redactor held an unfinished trigger word."""
    prose = "The deployment finished without errors and every health check answered in time. " * 2
    cases: list[tuple[Secret, list[str | None]]] = []
    for secret in SECRETS:
        whole = Secret(secret.shape, prose + secret.text, secret.values)
        for k, char in enumerate(whole.text):
            if char == " " and k >= len(prose) - 1:
                cases.append((whole, [whole.text[: k + 1], None, whole.text[k + 1 :]]))
    root = play_all(make_node, cases)
    assert_no_corpus_value_in_the_journal(root)


@pytest.mark.slow
def test_no_split_point_lets_a_secret_into_the_journal(make_node: MakeNode) -> None:
    """Every corpus secret cut at every point (9,000 runs, a minute or more: ``make test-slow``)."""
    assert_no_split_point_lets_a_secret_in(make_node, every=True)


def test_secrets_split_across_coalesced_chunks_in_a_long_answer(make_node: MakeNode) -> None:
    """The finding's case: a marker at the end of one 16-word chunk, the value in the next; and
    every secret in one long answer streamed word by word and in uneven pieces."""
    words = " ".join(f"w{i}" for i in range(1, 15))
    finding = Secret("bearer", f"{words} Bearer CANARYqW3rT5yU7iO9pA1sD and more", ("CANARY",))
    story = "\n".join(f"Step {i}: {s.text} (done)" for i, s in enumerate(SECRETS))
    long = Secret("all", story, tuple(v for s in SECRETS for v in s.values))
    sizes = itertools.cycle([1, 7, 2, 31, 3, 64, 5])
    uneven, at = [], 0
    while at < len(story):
        step = next(sizes)
        uneven.append(story[at : at + step])
        at += step
    root = play_all(
        make_node,
        [
            (finding, [f"{words} Bearer ", "CANARYqW3rT5yU7iO9pA1sD", " and more"]),
            (long, [w for w in story.split(" ") for w in (w, " ")][:-1]),
            (long, uneven),
        ],
    )
    raw = journal_bytes(root)
    assert b"CANARY" not in raw
    for value in long.values:
        assert value.encode() not in raw
