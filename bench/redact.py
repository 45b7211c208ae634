"""Redaction cost: reel's redaction against the version before issue 21, in the same run.

Every figure is measured next to its ceiling, on the same events, in the same run:

- ``ceiling``: the redaction of ``--baseline`` (default: main before issue 21), extracted from
  git into a temporary directory and measured by this same script in a child process
  (``--measure``) whose ``events`` package is that tree's; rounds alternate between the two;
- ``redact``: :func:`events.redaction.redact.redact_event` per event kind and for a mix, clean text
and
  text with secrets. ``tool.completed`` holds an fs.read result (JSON text, 4.5 KB of output
  in its ``content``), as tools make them; ``16 KiB, 20 secrets``: :func:`redact_text` of
  16 KiB of tool output with 20 secrets of ten shapes spread through it;
- ``append``: :meth:`events.Journal.append` of one ``run.output`` per call from one writer,
  ``synchronous=FULL`` (the default, one fsync per append) and ``synchronous=OFF`` (no fsync:
  the CPU cost shows);
- ``stream``: a 16-word ``run.output`` chunk streamed one word per delta through
  :class:`events.redaction.redact_stream.StreamRedactor`;
- ``detect-secrets`` (with ``--detect-secrets-python``, a Python that has detect-secrets
  installed): its recall and false positives on reel's corpus and its cost per line.

Each case runs ``--rounds`` times; the best round is reported. Targets print PASS/MISS, never
asserted. Run: ``.venv/bin/python bench/redact.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TREE = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--tree=")), str(REPO))
sys.path.insert(0, TREE)  # --measure runs the baseline's events package

from events import Journal, NodeKey  # noqa: E402
from events.catalog import (  # noqa: E402
    Event,
    RunAccepted,
    RunOutput,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.ids import UlidGenerator  # noqa: E402

try:  # the layout since issue 22
    from events.redaction.redact import redact_event, redact_text
    from events.redaction.redact_stream import StreamRedactor
except ModuleNotFoundError:  # the baseline's (``BASELINE``), before the move
    from events.redact import (  # type: ignore[import-untyped,no-redef,unused-ignore]
        redact_event,
        redact_text,
    )
    from events.redact_stream import StreamRedactor  # type: ignore[import-untyped,no-redef,unused-ignore]

BASELINE = "b0cf6f5"
"""main before issue 21: today's redaction."""
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


SHAPES = (
    "sk-Tq3vR9xLm2Np8Kd4Wz7Yb1Hc6Fg0J{i:03d}",
    "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q{i:03d}",
    "AKIAIOSFODNN7EXAM{i:03d}",
    "password=hunter2-Canary{i:03d}",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx{i:03d}fQ.c2lnbmF0dXJlX2Jhc2U2NA",
    "postgres://app:Pg-canary-pw{i:03d}@db:5432/app",
    "xoxb-1234567890-{i:03d}-AbCdEfGhIjKlMnOpQrStUvWx",
    "sk_live_4eC39HqLyjWDarjtT1zdp7{i:03d}",
    "--api-key Zx9-Qw8-Er7-Ty{i:03d}",
    "glpat-Ab1Cd2Ef3Gh4Ij5Kl{i:03d}",
)
LARGE = "".join(
    OUTPUT[:800].rsplit("\n", 1)[0] + "\n" + SHAPES[i % len(SHAPES)].format(i=i) + "\n"
    for i in range(20)
)
LARGE = (LARGE + OUTPUT * 4)[: 16 * 1024]
"""16 KiB of tool output with 20 secrets in its first 16 KB."""


def extract(rev: str) -> Path:
    """The ``events`` package of ``rev``, in a temporary directory."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "events"], check=True, capture_output=True
    ).stdout
    root = Path(tempfile.mkdtemp(prefix="reel-bench-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


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
            invocation_id=inv,
            run_id=run,
            tool="fs.read",
            ok=True,
            output=json.dumps(
                {"path": "logs/app.log", "size": 4500, "content": OUTPUT + extra, "lossy": False}
            ),
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


def per_event_us(redact: Callable[[Any], object], event: object, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        redact(event)
    return (time.perf_counter() - started) / n * 1e6


def mix_us(costs: dict[str, float]) -> float:
    return sum(costs[k] * w for k, w in MIX.items()) / sum(MIX.values())


def append_rate(work: Path, key: NodeKey, sync: str, n: int, tag: str) -> float:
    """Events/s of one writer appending one ``run.output`` per call (the journal's own
    redaction)."""
    ids = UlidGenerator()
    run = ids.new()
    event = RunOutput(run_id=run, turn=1, text=CHUNK)
    with Journal(work / f"append-{tag}.db", node_key=key, synchronous=sync) as journal:
        started = time.perf_counter()
        for seq in range(n):
            journal.append(f"run/{run}", [event], expected_seq=seq, correlation_id=run)
        return n / (time.perf_counter() - started)


def stream_us(n: int) -> float:
    """Per 16-word chunk streamed one word per delta: redaction work only."""
    words = re.findall(r"\S+\s*", CHUNK + " ")
    started = time.perf_counter()
    for _ in range(n):
        redactor = StreamRedactor()
        for word in words:
            redactor.feed(word)
        redactor.release()  # the run's flush tick
        redactor.finish()
    return (time.perf_counter() - started) / n * 1e6


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One round of every figure, for the ``events`` package this process imported."""
    out: dict[str, float] = {}
    ids = UlidGenerator()
    for secret in (False, True):
        which = "secrets" if secret else "clean"
        sample = events(ids, secret)
        for kind, event in sample.items():
            count = args.events // (20 if kind == "tool.completed" else 1)
            out[f"{kind} ({which})"] = per_event_us(redact_event, event, count)
        out[f"mix ({which})"] = mix_us({k: out[f"{k} ({which})"] for k in sample})
    out["16 KiB, 20 secrets"] = per_event_us(redact_text, LARGE, args.events // 100)
    out["stream"] = stream_us(args.events // 4)
    work = Path(tempfile.mkdtemp(prefix="reel-bench-redact-"))
    key = NodeKey.load_or_create(work / "node.key")
    for sync, n in (("OFF", args.appends), ("FULL", args.full_appends)):
        out[f"append {sync}"] = 1e6 / append_rate(work, key, sync, n, sync)
    return out


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
    parser.add_argument("--measure", action="store_true", help="(internal) one round, as JSON")
    parser.add_argument("--tree", help="(internal) where --measure imports events from")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return

    tree = extract(args.baseline)
    child = [sys.executable, __file__, "--measure", f"--tree={tree}"]
    child += [f"--events={args.events}", f"--appends={args.appends}"]
    child += [f"--full-appends={args.full_appends}"]
    print(
        f"machine  python {platform.python_version()}; ceiling: {args.baseline}'s redaction "
        f"(extracted from git, measured in a child process); best of {args.rounds} "
        "alternating round(s)"
    )
    old: dict[str, float] = {}
    new: dict[str, float] = {}
    for _ in range(args.rounds):
        run = subprocess.run(child, check=True, capture_output=True, text=True)
        for name, value in json.loads(run.stdout.strip().splitlines()[-1]).items():
            old[name] = min(old.get(name, float("inf")), value)
        for name, value in measure(args).items():
            new[name] = min(new.get(name, float("inf")), value)
    for name in new:
        if name.startswith(("append", "stream")):
            continue
        show("redact", name, f"{new[name]:.1f} us", ratio(new[name], old[name]))
    show(
        "stream",
        "16-word chunk, one word per delta",
        f"{new['stream']:.1f} us",
        ratio(new["stream"], old["stream"]),
    )
    for sync in ("FULL", "OFF"):
        cost_new, cost_old = new[f"append {sync}"], old[f"append {sync}"]
        total_new, total_old = cost_new + new["stream"], cost_old + old["stream"]
        show(
            "append",
            f"run.output, 1 writer, synchronous={sync}",
            f"{cost_new:.0f} us/ev",
            ratio(cost_new, cost_old, target=True),
        )
        show(
            "append",
            f"  + streaming redaction of the chunk ({sync})",
            f"{total_new:.0f} us/ev",
            ratio(total_new, total_old, target=True),
        )
    if args.detect_secrets_python:
        detect_secrets(args.detect_secrets_python, new["run.output (clean)"])


def ratio(new: float, old: float, *, target: bool = False) -> str:
    text = f"ceiling {old:.1f} us   ratio {new / old:.2f}"
    if target:
        met = new / old <= TARGET_APPEND_RATIO
        text += f" (target <= {TARGET_APPEND_RATIO})   {verdict(met)}"
    return text


def detect_secrets(python: str, reel_us: float) -> None:
    corpus = REPO / "tests" / "events" / "redaction_corpus"
    out = subprocess.run(
        [python, "-c", DETECT_SECRETS, str(corpus), CHUNK],
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
        f"   ratio to reel {ds['line_us'] / reel_us:.0f}x",
    )


if __name__ == "__main__":
    main()
