"""Redaction cost: reel's redaction against today's (the version before issue 11), in the same run.

Every figure is measured next to its ceiling, on the same events:

- ``ceiling``: today's redaction, loaded from git (``--baseline``, default the commit issue 11
  started from): its ``redact_event`` over the fields its catalog listed in ``redact_fields``;
- ``redact``: reel's :func:`events.redact.redact_event` (every string field redacted, every
  identifier checked), per event kind and for a mix, clean text and text with secrets;
- ``append``: :meth:`events.Journal.append` of one event per call from one writer, with today's
  redaction patched into the journal and with reel's, ``synchronous=FULL`` (the default, one
  fsync per append) and ``synchronous=OFF`` (no fsync: the CPU cost shows);
- ``stream``: a 16-word ``run.output`` chunk streamed one word per delta, today (coalesce, then
  redact the chunk) and now (:class:`events.redact_stream.StreamRedactor`, then coalesce);
- ``detect-secrets`` (with ``--detect-secrets-python``, a Python that has detect-secrets
  installed): its recall and false positives on reel's corpus and its cost per line.

Each case runs ``--rounds`` times; the best round is reported. Targets print PASS/MISS, never
asserted. Run: ``.venv/bin/python bench/redact.py`` (about 30 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from events import Journal, NodeKey  # noqa: E402
from events import journal as journal_module  # noqa: E402
from events.catalog import (  # noqa: E402
    Event,
    RunAccepted,
    RunOutput,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
    kind_of,
)
from events.ids import UlidGenerator  # noqa: E402
from events.redact import redact_event  # noqa: E402
from events.redact_stream import StreamRedactor  # noqa: E402

BASELINE = "0ecb8df"
"""The commit issue 11 started from: today's redaction."""
TARGET_APPEND_RATIO = 1.2
CHUNK = (
    "The journal stores each coalesced chunk of model output as one event, "
    "so replays match exactly."
)
MESSAGE = (
    "Please look at the deployment logs from last night and tell me why the health check "
    "failed twice around midnight; the service restarted on its own, but I want to know "
    "whether the database migration or the cache warm-up caused it, and what to change."
)
OUTPUT = (
    "total 48\ndrwxr-xr-x  5 app app 4096 May  1 10:00 .\n-rw-r--r--  1 app app  812 May  1 "
    "09:58 config.toml\n2024-05-01T00:00:01Z INFO health check ok latency_ms=12\n"
    "2024-05-01T00:00:31Z WARN health check slow latency_ms=950 max_tokens=512\n"
) * 24  # ~4.5 KB of tool output
SECRETS = (
    "key sk-Tq3vR9xLm2Np8Kd4Wz7Yb1Hc6Fg0Js5A, db postgres://app:Pg-canary-pw9@db:5432/app, "
    "password=hunter2-Canary!"
)


def load_today(rev: str) -> tuple[types.ModuleType, dict[str, tuple[str, ...]]]:
    """Today's redaction module and, per kind, the fields its catalog had it scan."""
    source = git_show(rev, "events/redact.py")
    module = types.ModuleType("redact_today")
    exec(compile(source, f"{rev}:events/redact.py", "exec"), module.__dict__)
    catalog = git_show(rev, "events/catalog.py")
    fields: dict[str, tuple[str, ...]] = {}
    for block in re.split(r"\nclass ", catalog)[1:]:
        tag = re.search(r'tag="([^"]+)"', block)
        listed = re.search(
            r"redact_fields: ClassVar\[frozenset\[str\]\] = frozenset\(\{([^}]*)\}", block
        )
        if tag:
            fields[tag.group(1)] = (
                tuple(re.findall(r'"([^"]+)"', listed.group(1))) if listed else ()
            )
    return module, fields


def git_show(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def today_redactor(
    module: types.ModuleType, fields: dict[str, tuple[str, ...]]
) -> Callable[[Event], Event]:
    """Today's ``redact_event``: its ``redact_value`` over the fields today's catalog listed."""
    redact_value = module.redact_value

    def redact(event: Event) -> Event:
        changes: dict[str, Any] = {}
        total = 0
        for name in fields.get(kind_of(event), ()):
            new, n = redact_value(getattr(event, name))
            if n:
                changes[name] = new
                total += n
        if not total:
            return event
        changes["redacted"] = event.redacted + total
        return msgspec.structs.replace(event, **changes)

    return redact


def events(ids: UlidGenerator, secret: bool) -> dict[str, Event]:
    """One event of each common kind, clean or holding secrets."""
    extra = f" {SECRETS}" if secret else ""
    run, inv, sess = ids.new(), ids.new(), ids.new()
    return {
        "run.output": RunOutput(run_id=run, turn=1, text=CHUNK + extra),
        "run.accepted": RunAccepted(
            run_id=run, session_id=sess, text=MESSAGE + extra, channel="http"
        ),
        "tool.proposed": ToolProposed(
            invocation_id=inv,
            run_id=run,
            session_id=sess,
            call_id="call_1",
            tool="http.fetch",
            arguments={
                "url": "https://api.example.test/v1/items?page=2",
                "headers": {
                    "Accept": "application/json",
                    "Authorization": "Bearer x" if secret else "",
                },
                "body": MESSAGE + extra,
            },
        ),
        "tool.completed": ToolCompleted(
            invocation_id=inv, run_id=run, tool="shell.run", ok=True, output=OUTPUT + extra
        ),
        "tool.decided": ToolDecided(
            invocation_id=inv,
            run_id=run,
            tool="shell.run",
            outcome="allow",
            reason="policy baseline.shell permits echo" + extra,
            policy_ids=("baseline.shell",),
            posture="always_allow",
        ),
        "run.turn_completed": RunTurnCompleted(
            run_id=run,
            turn=1,
            prompt_tokens=812,
            completion_tokens=96,
            tool_calls=1,
            finish_reason="tool_calls",
            calls=({"id": "call_1", "name": "shell.run", "arguments": '{"argv": ["ls", "-la"]}'},),
        ),
    }


MIX = {
    "run.output": 70,
    "run.accepted": 5,
    "tool.proposed": 5,
    "tool.completed": 5,
    "tool.decided": 5,
    "run.turn_completed": 10,
}
"""Events per 100 in a typical tape (chunks dominate)."""


def per_event_us(redact: Callable[[Event], Event], event: Event, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        redact(event)
    return (time.perf_counter() - started) / n * 1e6


def mix_us(costs: dict[str, float]) -> float:
    return sum(costs[k] * w for k, w in MIX.items()) / sum(MIX.values())


def append_rate(
    work: Path, key: NodeKey, redact: Callable[[Event], Event], sync: str, n: int, tag: str
) -> float:
    """Events/s of one writer appending one ``run.output`` per call with ``redact``."""
    saved = journal_module.redact_event
    journal_module.redact_event = redact  # type: ignore[assignment]
    try:
        ids = UlidGenerator()
        run = ids.new()
        event = RunOutput(run_id=run, turn=1, text=CHUNK)
        with Journal(work / f"append-{tag}.db", node_key=key, synchronous=sync) as journal:
            started = time.perf_counter()
            for seq in range(n):
                journal.append(f"run/{run}", [event], expected_seq=seq, correlation_id=run)
            return n / (time.perf_counter() - started)
    finally:
        journal_module.redact_event = saved


def stream_us(redact_text: Callable[[str], tuple[str, int]], new: bool, n: int) -> float:
    """Per 16-word chunk streamed one word per delta: redaction work only."""
    words = re.findall(r"\S+\s*", CHUNK + " ")
    started = time.perf_counter()
    for _ in range(n):
        if new:
            redactor = StreamRedactor()
            for word in words:
                redactor.feed(word)
            redactor.release()  # the run's flush tick
            redactor.finish()
        else:
            redact_text("".join(words))
    return (time.perf_counter() - started) / n * 1e6


DETECT_SECRETS = r"""
import json, sys, tempfile, time, tomllib
from pathlib import Path
from detect_secrets import SecretsCollection
from detect_secrets.settings import default_settings
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
corpus = Path(sys.argv[1]); prose = sys.argv[2]
secrets = tomllib.loads((corpus / "secrets.toml").read_text())["secret"]
harmless = [e["text"] for e in tomllib.loads((corpus / "harmless.toml").read_text())["harmless"]]
tmp = Path(tempfile.mkdtemp()) / "text.txt"
def scan(text):
    tmp.write_text(text)
    found = SecretsCollection(root=str(tmp.parent)); found.scan_file(str(tmp))
    return [(s.line_number, s.secret_value or "") for _, s in found]
with default_settings() as settings:
    located = flagged = 0
    for e in secrets:
        hits = scan(e["text"])
        values = [v for _, v in hits]
        located += all(any(v in f or (len(f) >= 8 and f in v) for f in values) for v in e["secret"])
        lines = e["text"].splitlines()
        need = {i + 1 for i, l in enumerate(lines) if any(v in l for v in e["secret"])} or {1}
        flagged += need <= {n for n, _ in hits}
    false = sum(1 for t in harmless if scan(t))
    def make(c):
        limit = {"limit": 4.5 if "Base64" in c.__name__ else 3.0}
        return c(**limit) if "Entropy" in c.__name__ else c()
    plugins = [make(c) for c in get_mapping_from_secret_type_to_class().values()]
    n = 1000; t0 = time.perf_counter()
    for _ in range(n):
        for p in plugins: p.analyze_line(filename="t.txt", line=prose, line_number=1)
    line_us = (time.perf_counter() - t0) / n * 1e6
    n = 200; t0 = time.perf_counter()
    for _ in range(n): scan(prose)
    scan_us = (time.perf_counter() - t0) / n * 1e6
print(json.dumps({"plugins": len(settings.plugins), "secrets": len(secrets), "located": located,
                  "flagged": flagged, "harmless": len(harmless), "false": false,
                  "line_us": line_us, "scan_us": scan_us}))
"""


def show(label: str, what: str, figure: str, rest: str = "") -> None:
    print(f"{label:<8} {what:<44} {figure:>14}   {rest}".rstrip())


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="git revision of today's redaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=20_000, help="redactions per case and round")
    parser.add_argument("--appends", type=int, default=3_000, help="appends per case (OFF)")
    parser.add_argument("--full-appends", type=int, default=300, help="appends per case (FULL)")
    parser.add_argument("--detect-secrets-python", help="a python with detect-secrets installed")
    args = parser.parse_args()

    module, fields = load_today(args.baseline)
    today = today_redactor(module, fields)
    print(
        f"machine  python {platform.python_version()}; baseline {args.baseline} (today's "
        f"redaction, loaded from git); best of {args.rounds} round(s)"
    )

    ids = UlidGenerator()
    for secret in (False, True):
        sample = events(ids, secret)
        old: dict[str, float] = dict.fromkeys(sample, float("inf"))
        new: dict[str, float] = dict.fromkeys(sample, float("inf"))
        for _ in range(args.rounds):
            for kind, event in sample.items():
                count = args.events // (20 if kind == "tool.completed" else 1)
                old[kind] = min(old[kind], per_event_us(today, event, count))
                new[kind] = min(new[kind], per_event_us(redact_event, event, count))
        which = "with secrets" if secret else "clean"
        for kind in sample:
            show(
                "redact",
                f"{kind} ({which})",
                f"{new[kind]:.1f} us",
                f"ceiling {old[kind]:.1f} us   ratio {new[kind] / old[kind]:.2f}",
            )
        m_old, m_new = mix_us(old), mix_us(new)
        show(
            "redact",
            f"mix per event ({which})",
            f"{m_new:.1f} us",
            f"ceiling {m_old:.1f} us   ratio {m_new / m_old:.2f}",
        )

    s_old = min(stream_us(module.redact_text, False, args.events // 4) for _ in range(args.rounds))
    s_new = min(stream_us(module.redact_text, True, args.events // 4) for _ in range(args.rounds))
    show(
        "stream",
        "16-word chunk, one word per delta",
        f"{s_new:.1f} us",
        f"ceiling {s_old:.1f} us (redact the chunk)   ratio {s_new / s_old:.2f}",
    )

    key_dir = Path(tempfile.mkdtemp(prefix="reel-bench-redact-"))
    key = NodeKey.load_or_create(key_dir / "node.key")
    for sync, n in (("OFF", args.appends), ("FULL", args.full_appends)):
        rate_old = rate_new = 0.0
        for r in range(args.rounds):
            rate_old = max(rate_old, append_rate(key_dir, key, today, sync, n, f"{sync}-old-{r}"))
            rate_new = max(
                rate_new, append_rate(key_dir, key, redact_event, sync, n, f"{sync}-new-{r}")
            )
        cost_old, cost_new = 1e6 / rate_old, 1e6 / rate_new
        ratio = cost_new / cost_old
        show(
            "append",
            f"run.output, 1 writer, synchronous={sync}",
            f"{cost_new:.0f} us/ev",
            f"ceiling {cost_old:.0f} us/ev   ratio {ratio:.2f} (target <= {TARGET_APPEND_RATIO})"
            f"   {verdict(ratio <= TARGET_APPEND_RATIO)}",
        )
        # A chunk also went through the stream redactor before it was appended (today: not).
        total = cost_new + s_new
        whole = total / cost_old
        show(
            "append",
            f"  + streaming redaction of the chunk ({sync})",
            f"{total:.0f} us/ev",
            f"ceiling {cost_old:.0f} us/ev   ratio {whole:.2f} (target <= {TARGET_APPEND_RATIO})"
            f"   {verdict(whole <= TARGET_APPEND_RATIO)}",
        )

    if args.detect_secrets_python:
        corpus = REPO / "tests" / "events" / "redaction_corpus"
        out = subprocess.run(
            [args.detect_secrets_python, "-c", DETECT_SECRETS, str(corpus), CHUNK],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        ds = json.loads(out.strip().splitlines()[-1])
        show(
            "d-s",
            f"detect-secrets: {ds['plugins']} plugins, corpus recall",
            f"{ds['located']}/{ds['secrets']}",
            f"(values located; lines flagged {ds['flagged']}/{ds['secrets']})",
        )
        show("d-s", "detect-secrets: harmless texts flagged", f"{ds['false']}/{ds['harmless']}")
        show(
            "d-s",
            "detect-secrets: cost per 16-word line",
            f"{ds['line_us']:.0f} us",
            f"plugins only; {ds['scan_us']:.0f} us with its file scan and filters;"
            f"   ratio to reel {ds['line_us'] / min(new['run.output'], 1e9):.0f}x",
        )


if __name__ == "__main__":
    main()
