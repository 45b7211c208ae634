"""Streaming redaction: text that arrives in pieces is redacted as the one text it makes.

A model streams its answer in deltas of any size, down to one character. Redacting each piece
on its own lets a secret through whenever a boundary falls inside it (``... Bearer `` |
``CANARY...``, or a private key block spread over fifty deltas), and what reaches the journal
can never be taken back. :class:`StreamRedactor` sits between the provider and the journal and
releases only text whose verdict can no longer change; the rest is held back:

* text is released up to a whitespace character, so a token (every prefixed key, a JWT, a URL
  with a password, a bare AWS key) is judged whole;
* never inside a match (a key and its value, ``Bearer`` and its credential), nor before a
  match still open at the end of the held text (a token still growing, a quoted value not yet
  closed, a private key block without its END line yet: a block is held until its END line or
  the end of the turn);
* never after a trigger word (every detector's
:attr:`~events.redaction.detectors.Detector.trigger`: a
  key that names a secret in any language, ``Bearer``, ``Basic``, ``Authorization``,
  ``Cookie``, the programs whose flags take a password, a vendor's name, ``-----BEGIN``) until
  :data:`~events.redaction.detectors.REACH` characters have followed it, the farthest its value can
  end; a key block waits for its own END line (:attr:`~events.redaction.detectors.Detector.end`);
* nor at the space inside a trigger word the held text ends part-way through (``mot de``
  before ``passe`` arrives: released, the key's first word would leave its value unrecognised).

So ordinary prose flows with a few words of delay (a scan every SCAN_STEP characters, and on
the run's 50 ms flush tick), and text near a trigger waits up to REACH (320) characters.
Released text is exactly what :func:`events.redaction.redact.redact_text` makes of the whole text
(the tests check every split point of the corpus, also with a release at it after prose), and
:meth:`StreamRedactor.finish` releases the rest at the end of the turn.

**Memory is bounded** by ``max_hold`` (64 KiB of held text by default): past it, a match that
is still open is replaced by the marker right away and its remaining input is dropped until it
ends (a key block at its END line, a header or key/value at the end of its line, a token at
the next space; what is dropped is looked at as it goes: a key block begun in it is dropped
to its own END line, a header still open in it to its line's end, and after a trigger word in
it the drop goes on REACH characters from the word and then to the next space, as far as what
the word begins can run); held text without an open match is released
up to REACH characters before its end. Either way the stream may then redact more than the
whole text would, never less.
"""

from __future__ import annotations

import re
from functools import cache

from events.redaction.detectors import MARKER, REACH, Expression, trie
from events.redaction.escapes import ESCAPE, PARTIAL_ESCAPE, unescaped
from events.redaction.redact import REACH_BACK, Guard, apply_spans, detectors, scan

MAX_HOLD_CHARS = 64 * 1024
"""Held text past which the redactor stops waiting (see the module docstring)."""
CONTEXT_CHARS = REACH_BACK
"""Released text kept as context for the next cut: for look-behinds (``\\b``, "not after a
letter") and for a vendor rule's keyword, which may be up to REACH_BACK characters before its
token (``Our sourcegraph token:`` released, then ``3f2a…``: the rule needs ``sourcegraph``)."""
_END_OVERLAP = 128
"""Characters kept while waiting for a key block's END line split across deltas."""
_SPACES = " \n\t\r\x0b\x0c"
"""Where text may be cut (other Unicode spaces are treated as part of a word: fewer cuts)."""
_SPACE = re.compile(f"[{re.escape(_SPACES)}]")
SCAN_STEP = 128
"""Held characters that make :meth:`StreamRedactor.feed` look for text to release (a scan of
what is held); fewer wait for :meth:`StreamRedactor.release` (the run's 50 ms flush tick) or
the end of the turn. So a model streaming a word per delta costs a scan every few words."""


@cache
def _trigger_words() -> re.Pattern[str]:
    """Where a match that may span whitespace can start (or the first whitespace-free run it
    lies in): every detector's trigger words (:attr:`events.redaction.detectors.Detector.trigger`),
    plain words in the case-folded text, and ``\\u``/``\\x`` escapes (a key spelt with them is read
    through them). Holding at a few more places than needed costs latency only. Compiled on
    first use, as the detectors are."""
    words = {w.casefold() for d in detectors() for w in d.trigger}
    return re.compile(trie(words) + r"|\\u[0-9a-f]{4}|\\x[0-9a-f]{2}")


@cache
def _longest_trigger() -> int:
    """The longest trigger word (case-folded), in characters as read."""
    return max(len(w.casefold()) for d in detectors() for w in d.trigger)


_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


@cache
def _split_trigger_starts() -> tuple[frozenset[str], int]:
    """The beginnings (every proper prefix) of the trigger words with a space inside
    (``mot de passe``, ``پاس ورڈ``), case-folded, and the longest one's length."""
    starts = {
        word.casefold()[:end]
        for d in detectors()
        for word in d.trigger
        if any(c in _SPACES for c in word)
        for end in range(1, len(word.casefold()))
    }
    return frozenset(starts), max(map(len, starts), default=0)


def _unfinished_trigger(buf: str, start: int) -> int | None:
    """Where a trigger word with a space inside starts when the text ends part-way through it
    (``... mot de `` before ``passe`` arrives), at or after ``start``: cut at that space, the
    key's first word would be released and its value, arriving later, read without it."""
    starts, longest = _split_trigger_starts()
    at = max(start, len(buf) - longest)
    # Case-folded, not lower-cased: a cut word's last capital sigma lower-cases as a final
    # one (``ΠΡΌΣ`` -> ``πρός``), which no prefix of ``πρόσβασης`` is.
    tail = buf[at:].casefold()
    if len(tail) != len(buf) - at:  # case-folding changed the length (``ß``): hold it
        return at
    return next((at + i for i in range(len(tail)) if tail[i:] in starts), None)


def _first_trigger(buf: str, start: int, back: int | None = None) -> int | None:
    """Where the first construct that may span whitespace starts at or after ``start``: the
    start of the key run (``DB_PASSWORD``) around the first trigger word, or around a trigger
    word the text ends part-way through; in the text as written and as a reader sees it
    through its escapes (``mot de \\u0070asse``, which :func:`~events.redaction.redact.scan`
    reads too), an escape the text ends part-way through left out. ``back``: look at most
    this far before the word for its run's start (no match starts farther before its trigger
    word than REACH, ``tests/events/redaction/test_reach.py``; a forced cut in a long run must
    not walk back over all of it)."""
    found = _trigger_start(buf, start)
    if "\\" in buf[start:]:
        # Every escape is a trigger itself (:func:`_trigger_words`), so a word read through
        # one includes the first escape or the unfinished one at the end: only the text
        # around it, a word's length either side (six times that as written), is read so.
        partial = PARTIAL_ESCAPE.search(buf, start)
        end = len(buf) if partial is None else partial.start()
        first = end if found is None else min(found, end)
        lo = max(start, first - _longest_trigger())
        region = buf[lo : min(end, first + 6 * _longest_trigger())]
        view = unescaped(region)
        if view is not None or partial is not None:
            seen = _trigger_start(region if view is None else view.text, 0)
            if seen is not None:
                at = lo + (seen if view is None else view.start(seen))
                found = at if found is None else min(found, at)
    if found is None:
        return None
    floor = 0 if back is None else max(0, found - back)
    while found > floor and buf[found - 1] in _KEY_CHARS:
        found -= 1
    return found


def _reach_start(buf: str, pos: int) -> int:
    """Where the last REACH characters of the held text begin, counted as written and as a
    reader sees them through their escapes, whichever begins earlier: a construct is REACH
    wide in the view (a host of 60 ``\\u4f8b`` is 360 characters as written, 60 as read)."""
    start = max(pos, len(buf) - REACH)
    if "\\" not in buf[start:]:
        return start  # no escape in the last REACH as written: as read, the same span
    # Counted back from the end over the escapes of a tail that covers REACH at 8 to 1 (an
    # escape is at most 6 characters as written, more only behind a run of backslashes: then
    # everything held is looked at).
    tail = max(pos, len(buf) - 8 * REACH)
    need, at = REACH, len(buf)
    for found in reversed(list(ESCAPE.finditer(buf, tail))):
        plain = at - found.end()
        if plain >= need:
            return min(start, at - need)
        need -= plain + 1
        at = found.start()
        if need <= 0:
            return min(start, at)
    return min(start, at - need) if at - need >= tail else pos


def _trigger_start(buf: str, start: int) -> int | None:
    """Where the first trigger word at or after ``start`` starts, or one the text ends
    part-way through."""
    folded = buf[start:].casefold()  # a capital sigma folds one way, cut or not
    if len(folded) == len(buf) - start:
        found = _trigger_words().search(folded)
    else:  # case-folding changed the length (``ß``)
        found = re.compile(_trigger_words().pattern, re.IGNORECASE).search(buf[start:])
    starts = [start + found.start()] if found is not None else []
    unfinished = _unfinished_trigger(buf, start)
    if unfinished is not None:
        starts.append(unfinished)
    return min(starts, default=None)


class StreamRedactor:
    """Redacts one stream of text deltas (one model turn). Pure: no clock, no I/O.

    ``feed`` returns what may be released now, ``finish`` the rest; each returns the text and
    how many secrets it replaced. Not thread-safe (one per turn, owned by the run's actor).
    """

    def __init__(self, max_hold: int = MAX_HOLD_CHARS) -> None:
        if max_hold < 2 * REACH:
            raise ValueError(f"max_hold must be at least {2 * REACH}, got {max_hold}")
        self.max_hold = max_hold
        self._buf = ""
        """Released context (the last few characters) followed by the held text."""
        self._pos = 0
        """Where the held text starts in ``_buf``."""
        self._block_at: int | None = None
        """Set while the held text ends in an open key block that starts here: only its END
        line can change anything, so input is only searched for that."""
        self._block_end: Expression | None = None
        """The END line of that block (or of the block being swallowed)."""
        self._block_searched = 0
        self._swallow: str | None = None
        """After giving up on an open match: what ends it (``block``, ``line``, ``space``; or
        ``reach``: a trigger word was in what was dropped, see ``_reach_left``)."""
        self._tail = ""
        """While swallowing a block: its last characters (an END line may be split); else the
        last REACH characters dropped (a trigger word there may own what follows)."""
        self._owed = 0
        """While swallowing to a trigger word's reach: characters still to drop."""
        self._held_at_scan = 0
        """How much was held after the last scan (a new scan waits for SCAN_STEP more)."""

    @property
    def held(self) -> int:
        """Characters held back (or, while swallowing, 0: that input is already replaced)."""
        return len(self._buf) - self._pos

    def feed(self, delta: str) -> tuple[str, int]:
        """Add a delta; returns the redacted text that may be released now and its count."""
        if not delta:
            return "", 0
        if self._swallow is not None:
            delta = self._swallowed(delta)
            if not delta:
                return "", 0
        self._buf += delta
        if self._block_at is not None:
            # An open key block: nothing changes until its END line arrives.
            assert self._block_end is not None
            found = self._block_end.compiled().search(
                self._buf, max(self._block_searched, self._block_at)
            )
            self._block_searched = max(self._block_at, len(self._buf) - _END_OVERLAP)
            if found is None:
                if self.held > self.max_hold:
                    return self._give_up(self._block_at, "block")
                return "", 0
            self._block_at = None
        elif self.held <= self.max_hold and self.held - self._held_at_scan < SCAN_STEP:
            return "", 0  # released by the next release(), a later feed, or finish()
        return self._release(final=False)

    def release(self) -> tuple[str, int]:
        """Release what may be released now (the run calls this on its flush tick, so held
        text that is safe goes out within 50 ms even when the model pauses)."""
        if self._swallow is not None or self._block_at is not None or not self.held:
            return "", 0
        return self._release(final=False)

    def finish(self) -> tuple[str, int]:
        """The end of the turn: everything still held, redacted."""
        if self._swallow is not None:
            self.reset()
            return "", 0
        out = self._release(final=True)
        self.reset()
        return out

    def reset(self) -> None:
        """Drop everything held (a stopped turn's output is not recorded)."""
        self._buf = ""
        self._pos = 0
        self._block_at = None
        self._block_end = None
        self._block_searched = 0
        self._swallow = None
        self._tail = ""
        self._owed = 0
        self._held_at_scan = 0

    # --- internals -----------------------------------------------------------------------

    def _release(self, *, final: bool) -> tuple[str, int]:
        buf, pos = self._buf, self._pos
        if not final and self.held <= self.max_hold and _SPACE.search(buf, pos) is None:
            # No whitespace held: no place to cut, so nothing to scan for (a long run of
            # escapes was scanned whole every SCAN_STEP characters: 81 s for 200 KB).
            self._held_at_scan = self.held
            return "", 0
        spans, guards = scan(buf, pos)
        size = len(buf)
        cut = size if final else self._cut(buf, pos, guards)
        if cut <= pos and not final:
            if size - pos > self.max_hold:
                return self._overflow(buf, pos, spans, guards)
            self._note_block(guards, size, 0)
            self._held_at_scan = self.held
            return "", 0
        done = [(s, e) for s, e in spans if e <= cut]
        text = apply_spans(buf, done, pos, cut)
        shift = self._advance(cut)
        if not final:
            self._note_block(guards, size, shift)
        self._held_at_scan = self.held
        return text, len(done)

    def _cut(self, buf: str, pos: int, guards: list[Guard], limit: int | None = None) -> int:
        """The last place at or before ``limit`` (default: the end) that is after whitespace,
        inside no match, before every open match and every undecided trigger; ``pos`` if
        none."""
        size = len(buf)
        limit = size if limit is None else limit
        for guard in guards:
            if guard.end >= size or (
                detectors()[guard.detector].continues and not buf[guard.end :].strip()
            ):
                limit = min(limit, guard.start)
        trigger = _first_trigger(buf, _reach_start(buf, pos))
        if trigger is not None:
            limit = min(limit, trigger)
        inside = [(g.start, g.end) for g in guards if g.start < limit]
        before = limit
        while before > pos:
            space = max(buf.rfind(c, pos, before) for c in _SPACES)
            if space < pos:
                return pos
            cut = space + 1
            if not any(s < cut < e for s, e in inside):
                return cut
            before = space
        return pos

    def _note_block(self, guards: list[Guard], size: int, shift: int) -> None:
        """Remember an open key block at the end of the held text (see ``_block_at``);
        ``shift``: how far ``_buf`` moved since ``guards`` were found."""
        for guard in guards:
            if guard.end >= size and detectors()[guard.detector].multiline:
                self._block_at = guard.start - shift
                self._block_end = detectors()[guard.detector].end
                self._block_searched = self._block_at
                return

    def _overflow(
        self, buf: str, pos: int, spans: list[tuple[int, int]], guards: list[Guard]
    ) -> tuple[str, int]:
        """Held text passed ``max_hold`` with no place to cut (``spans`` and ``guards``: its
        scan)."""
        open_guards = _open_at_end(guards, len(buf))
        if open_guards:
            ends = self._swallow_to(open_guards) or "space"
            return self._give_up(open_guards[0].start, ends, guards)
        # A run without whitespace: cut REACH characters before the end, outside every match.
        cut = self._forced_cut(buf, pos, guards)
        done = [(s, e) for s, e in spans if e <= cut]
        text = apply_spans(buf, done, pos, cut)
        self._advance(cut)
        return text, len(done)

    def _forced_cut(self, buf: str, pos: int, guards: list[Guard]) -> int:
        cut = len(buf) - REACH
        trigger = _first_trigger(buf, max(pos, cut), back=REACH)
        if trigger is not None:
            cut = min(cut, trigger)
        for guard in sorted(guards, key=lambda g: g.start, reverse=True):
            if guard.start < cut < guard.end:
                cut = guard.start
        return max(cut, pos)

    def _give_up(self, start: int, ends: str, guards: list[Guard] | None = None) -> tuple[str, int]:
        """Release the held text before ``start``, the marker for everything from ``start``
        on, and drop input until what ``ends`` names (``block``: the END line; ``line``: a line
        break; ``space``: any whitespace). A match the start falls inside (``token=Xq7ab`` glued
        to a BEGIN line: its value runs to the next space) is given up from its own start.
        ``guards``: the held text's scan, when the caller has it."""
        buf, pos = self._buf, self._pos
        inside = scan(buf, pos)[1] if guards is None else guards
        while (
            earlier := min((g.start for g in inside if g.start < start < g.end), default=None)
        ) is not None:
            start = earlier
        start = max(start, pos)
        spans = scan(buf[:start], pos)[0] if start > pos else []
        text = apply_spans(buf, spans, pos, start) + MARKER
        # A block: its last characters (an END line may be split). Otherwise what is dropped
        # (a key block's BEGIN line may be split, a trigger word may own what follows).
        self._tail = buf[-_END_OVERLAP:] if ends == "block" else buf[start:][-REACH:]
        self._buf, self._pos = "", 0
        self._block_at = None
        self._swallow = ends
        return text, len(spans) + 1

    def _swallow_to(self, open_guards: list[Guard]) -> str | None:
        """What ends the most far-reaching of the matches still open at the end of dropped
        text: a key block's END line (any open guard a block: its END is set), else a line
        break (any a header or key/value), else None (tokens: the next space)."""
        for guard in open_guards:
            detector = detectors()[guard.detector]
            if detector.multiline:
                self._block_end = detector.end
                return "block"
        if any(detectors()[g.detector].ends_at_line_end for g in open_guards):
            return "line"
        return None

    def _swallowed(self, delta: str) -> str:
        """While swallowing: drop ``delta`` up to the end of what was given up; returns what
        follows it (redacted as usual from there), or "" while it goes on. What is dropped is
        looked at as it goes: a match still open at its end (a key block, a header), a BEGIN
        line a token runs into, or a trigger word whose construct may go on, is dropped too."""
        while True:
            if self._swallow == "block":
                text = self._tail + delta
                assert self._block_end is not None
                found = self._block_end.compiled().search(text)
                if found is None:
                    self._tail = text[-_END_OVERLAP:]
                    return ""
                rest = text[found.end() :]
                break
            if self._swallow == "reach":  # to the first space ``_owed`` characters on
                skip = min(self._owed, len(delta))
                self._owed -= skip
                stop = next((i for i in range(skip, len(delta)) if delta[i].isspace()), -1)
            else:
                stops = "\r\n" if self._swallow == "line" else None
                stop = next(
                    (i for i, c in enumerate(delta) if (c in stops if stops else c.isspace())), -1
                )
            dropped = self._tail + (delta if stop < 0 else delta[:stop])
            mode = self._swallow_to(_open_at_end(scan(dropped, 0)[1], len(dropped)))
            delta = "" if stop < 0 else delta[stop:]
            if mode == "block":  # its body goes on past this line: drop to its END line
                self._swallow, self._tail = "block", dropped[-_END_OVERLAP:]
                continue
            self._tail = dropped[-REACH:]
            if stop < 0:
                return ""
            if self._swallow != "line" and (mode == "line" or _block_may_begin(dropped)):
                # A header goes on to its line's end; so does a BEGIN line (it has spaces).
                self._swallow = "line"
                continue
            owed = _reach_left(dropped)
            if owed > 0:  # a trigger word in what is dropped: its construct may go on
                self._swallow, self._owed = "reach", owed
                continue
            rest = delta
            break
        self._swallow = None
        self._tail = ""
        return rest

    def _advance(self, cut: int) -> int:
        """Release up to ``cut``; returns how far ``_buf`` moved."""
        keep = max(0, cut - CONTEXT_CHARS)
        self._buf = self._buf[keep:]
        self._pos = cut - keep
        return keep


def _open_at_end(guards: list[Guard], size: int) -> list[Guard]:
    """The guards of matches still open at the end of a text of ``size``, first-starting first."""
    return sorted((g for g in guards if g.end >= size), key=lambda g: g.start)


def _reach_left(dropped: str) -> int:
    """How far past the end of ``dropped`` a construct begun by a trigger word in it may still
    run (REACH from the word's start; 0: none). Dropped only to the end of its line or token,
    ``machine host`` would leave ``login u`` / ``password VALUE`` on the next lines as prose."""
    at = max(0, len(dropped) - REACH)
    folded = dropped[at:].casefold()
    if len(folded) != len(dropped) - at:  # case-folding changed the length: assume the worst
        return REACH
    starts = [found.start() for found in _trigger_words().finditer(folded)]
    unfinished = _unfinished_trigger(dropped, at)
    if unfinished is not None:
        starts.append(unfinished - at)
    return REACH - (len(folded) - max(starts)) if starts else 0


@cache
def _block_words() -> tuple[str, ...]:
    """The first word of every key block's trigger (``-----begin``, ``----``,
    ``putty-user-key-file``), case-folded."""
    words = {w.casefold().split()[0] for d in detectors() if d.multiline for w in d.trigger}
    return tuple(sorted(words))


def _block_may_begin(dropped: str) -> bool:
    """Whether the last whitespace-free run of ``dropped`` holds a key block trigger's first
    word: a token swallowed to the next space may run into a BEGIN line, which goes on after
    that space."""
    runs = dropped[-_END_OVERLAP:].split()
    return bool(runs) and any(word in runs[-1].casefold() for word in _block_words())


def redact_chunks(chunks: list[str]) -> tuple[str, int]:
    """Feed ``chunks`` through one :class:`StreamRedactor`; the released text and its count
    (for tests and benchmarks)."""
    redactor = StreamRedactor()
    out: list[str] = []
    total = 0
    for chunk in chunks:
        text, n = redactor.feed(chunk)
        out.append(text)
        total += n
    text, n = redactor.finish()
    out.append(text)
    return "".join(out), total + n
