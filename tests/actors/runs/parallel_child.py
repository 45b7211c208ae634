"""Child process for test_parallel_restart.py: a node whose run has four read-only calls in
flight at once, two of them finished, then wait to be killed.

Usage: ``python parallel_child.py DATA_DIR BASE_URL``. Opens the data dir with ``open_runtime``
(as ``reel node`` does) and starts one run of four ``http.fetch`` calls of the parent's
:class:`~tests.actors.runs.readserver.ReadServer`: ``/plain`` 1 and 2 (answered at once),
``/hold`` 3 and 4 (held until the parent releases them). Prints one JSON line with the run's id
once two ``tool.completed`` are on its tape, and sleeps until the parent kills it with SIGKILL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from actors.messages import StartRun
from transports.config import NodeConfig, ToolsSection
from transports.runtime import open_runtime

POLICY = """
@id("test.fetch_unasked")
permit (principal, action == Action::"tool.execute", resource == Tool::"http.fetch")
when { context.posture == "always_allow" };
"""
"""Written to the data dir's policies/: the baseline asks a human for every egress call."""
CONFIG = NodeConfig(
    tools=ToolsSection(
        http_allowlist=("127.0.0.1",),
        http_allow_private=("127.0.0.1/32",),
        postures={"http.fetch": "always_allow"},
    )
)


def text(base: str) -> str:
    paths = ("plain", "plain", "hold", "hold")
    urls = [f"{base}/{path}?n={n}" for n, path in enumerate(paths, start=1)]
    return "four reads\n" + "\n".join(
        "/tool http.fetch " + json.dumps({"url": url}) for url in urls
    )


def main(data_dir: Path, base: str) -> None:
    (data_dir / "policies").mkdir(exist_ok=True)
    (data_dir / "policies" / "reads.cedar").write_text(POLICY)
    runtime = open_runtime(data_dir, config=CONFIG)
    ticket = runtime.node.ask(StartRun(text=text(base), session_key="reader", create=True))
    deadline = time.monotonic() + 30
    while (
        sum(s.kind == "tool.completed" for s in runtime.journal.read_correlated(ticket.run_id)) < 2
    ):
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for two results")
        time.sleep(0.01)
    print(json.dumps({"run_id": ticket.run_id}), flush=True)
    time.sleep(120)  # the parent kills us long before this


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
