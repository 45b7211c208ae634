"""shell.run in bubblewrap: the sandbox's cost per call, against unconfined spawns in one run.

Every figure is a wall-clock time per call of ``true`` (which does nothing, so what is measured
is the cost of starting and reaping), best of ``--rounds`` interleaved rounds of ``--calls``
calls each, reported as p50 and p95:

- ``ceiling``: ``subprocess.Popen`` of ``true`` exactly as shell.run spawned programs before
  the sandbox (stdout/stderr pipes read to EOF, scrubbed environment, own session, the same
  rlimits in ``preexec_fn``): the unconfined spawn, no reel code;
- ``bwrap``: the same spawn of bubblewrap running ``true`` under shell.run's profile
  (`tools.sandbox.Launch`: namespaces, binds, memfd options), no reel code around it;
- ``shell.run``: ``ToolCatalog.execute("shell.run", {"argv": ["true"]})``, the whole path a
  tool actor takes (resolution, wrapper check, workspace descriptor, sandbox, supervision,
  report), sandboxed;
- ``probe``: the one-time start-up probe (`tools.sandbox.probe`), uncached.

The sandbox's overhead is ``shell.run`` minus ``ceiling`` (target: under 20 ms at p50).

- ``vault``: what a call that names a secret by handle costs on top of the call itself, with
  ``VAULT_SECRETS`` secrets in the vault: the ``vault.use`` decision (Cedar), resolving the
  headers' handles, and scrubbing a 16 KiB result of every value's forms (target: under 1 ms at
  p50; docs/vault.md).

Then ``fs.search`` over a tree of ``--search-files`` files (10,000 by default, 100 per directory,
about 1 KB each; one file in 100 holds the word searched): a literal and a regex search through
``ToolCatalog.execute``, median of ``--rounds`` runs each (recorded, no target), and the
workspace checkpoint's tree walk around a ``shell.run`` call over the same tree: the first
(every file hashed and stored) and a repeat (nothing moved, nothing read).
Targets are printed as PASS/MISS, never asserted.

- ``mcp``: ``ToolCatalog.execute("mcp.probe.add")`` on a warm stdio MCP server in the sandbox
  (tests/tools/mcp/servers/probe_server.py), against the same server called directly with the
  SDK's ``Client`` over ``stdio_client`` (unconfined, warm); target <= 1.5x (the sandbox's start
  is paid once, at the server's start, and is not in the per-call figure). Skipped without
  ``.venv-mcp-servers`` (``make .venv-mcp-servers/.installed``).

- ``parallel``: one run whose model proposes four ``http.fetch`` GETs of a loopback server that
  answers each after ``SLOW_READ_S``, through a real node (journal, Cedar, tool actors, the
  deterministic provider), with ``[runs] max_parallel_tool_calls`` 4 against 1 (every call alone,
  as before): the run's wall time from ``StartRun`` to its end, median of ``--rounds``
  alternated rounds; target >= 3x.

Run: ``.venv/bin/python bench/tool_calls.py`` (about half a minute).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.checkpoints import BlobStore, Checkpointer
from tools.files import FileRuntime
from tools.sandbox import GUEST_WORKSPACE, Launch, Sandbox, _probe, probe
from tools.sandbox_user import sandbox_user
from tools.shell import ShellRuntime, _limits

REPO = Path(__file__).resolve().parent.parent

TARGET_OVERHEAD_MS = 20.0
TARGET_VAULT_MS = 1.0
VAULT_SECRETS = 20


def vault_case(work: Path) -> Callable[[], None]:
    """One call's vault work: decide ``vault.use``, resolve two header handles, scrub a 16 KiB
    result; on a vault of ``VAULT_SECRETS`` secrets in a real journal under ``work``."""
    from actors.vault.store import open_vault
    from events import Journal, NodeKey
    from policies import PolicyEngine, SecretRequest
    from tools.handles import resolve_all

    journal = Journal(work / "journal.db", node_key=NodeKey.load_or_create(work / "node.key"))
    vault = open_vault(journal, work)
    for i in range(VAULT_SECRETS):
        vault.set(journal, f"secret_{i}", f"value-{i:02d}-{os.urandom(12).hex()}", by="bench")
    journal.close()
    engine = PolicyEngine.load(None)
    request = SecretRequest(
        principal="admin", tool="http.fetch", secret="secret_7", roles=("admin",)
    )
    headers = {"Authorization": "Bearer ${vault:secret_7}", "X-Other": "${vault:secret_3}"}
    result = ("lorem ipsum dolor sit amet " * 600)[: 16 * 1024]

    def call() -> None:
        assert engine.decide_secret(request).allowed
        resolve_all(headers, vault.resolve, "headers")
        vault.terms().scrub(result)

    return call


def ceiling_call(true: str, workspace: Path, config: ToolsConfig) -> None:
    """One unconfined spawn of ``true``, as shell.run did it before the sandbox."""
    proc = subprocess.Popen(
        [true],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workspace,
        env={"PATH": config.shell_path, "LANG": "C.UTF-8", "HOME": str(workspace)},
        start_new_session=True,
        close_fds=True,
        preexec_fn=_limits(config),
    )
    proc.communicate()
    assert proc.returncode == 0


def bwrap_call(true: str, workspace: Path, config: ToolsConfig, sandbox: Sandbox) -> None:
    """One spawn of bubblewrap running ``true`` under shell.run's profile."""
    root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    launch = Launch.prepare(
        sandbox,
        workspace_fd=root,
        cwd=GUEST_WORKSPACE,
        env={"PATH": config.shell_path, "LANG": "C.UTF-8", "HOME": GUEST_WORKSPACE},
        command=[true],
        max_processes=config.shell_max_processes,
        limits=_limits(config),
    )
    try:
        proc = subprocess.Popen(
            launch.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            start_new_session=True,
            close_fds=True,
            pass_fds=launch.pass_fds,
            preexec_fn=launch.preexec,
        )
        launch.started()
        proc.communicate()
        assert proc.returncode == 0 and "child-pid" in launch.status()
    finally:
        launch.close()
        os.close(root)


def shell_call(catalog: ToolCatalog, workspace: Path) -> None:
    """One ``shell.run`` of ``true`` through the catalog, as the tool actor calls it."""
    args = catalog.validate("shell.run", {"argv": ["true"]})
    result = catalog.execute("shell.run", args, ExecutionContext.start(workspace, 30))
    assert result.ok, result.error


def timed(call: Callable[[], None], calls: int) -> list[float]:
    """Milliseconds per call, ``calls`` times."""
    out: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def show(label: str, what: str, ms: list[float], rest: str = "") -> None:
    figure = f"p50 {statistics.median(ms):6.2f} ms  p95 {p(ms, 95):6.2f} ms"
    print(f"{label:<10} {what:<52} {figure}   {rest}".rstrip())


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def run(work: Path, args: argparse.Namespace) -> int:
    workspace = work / "workspace"
    workspace.mkdir()
    config = ToolsConfig(shell_allowlist=("true",), workspace_dir=str(workspace))
    true = shutil.which("true", path=config.shell_path)
    assert true is not None, "no `true` on shell_path"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine    {os.cpu_count()} cores, load average {load} (1/5/15 min) at start; "
        f"python {platform.python_version()}; uid {os.getuid()}"
    )
    (work / "vault").mkdir()
    vault_call = vault_case(work / "vault")
    timed(vault_call, 20)
    vault_ms = min(
        (timed(vault_call, args.calls) for _ in range(args.rounds)), key=statistics.median
    )
    show("vault", f"vault.use + 2 handles + scrub 16 KiB, {VAULT_SECRETS} secrets", vault_ms)
    print(
        f"{verdict(statistics.median(vault_ms) < TARGET_VAULT_MS)}       a call naming a secret "
        f"costs under {TARGET_VAULT_MS:.0f} ms of vault work: {statistics.median(vault_ms):.3f} ms "
        "(p50)"
    )
    _probe.cache_clear()
    started = time.perf_counter()
    found = probe(
        config.shell_bwrap,
        search_path=config.shell_path,
        network=False,
        tmp_bytes=config.shell_tmp_bytes,
        hidden=(str(work),),
        user=sandbox_user(config.shell_uid, config.shell_gid),
    )
    probe_ms = (time.perf_counter() - started) * 1000
    if not isinstance(found, Sandbox):
        print(f"sandbox    unavailable: {found}")
        return 1
    print(f"sandbox    {found.describe()}; probe at start {probe_ms:.1f} ms (uncached)")
    if found.user is not None:  # as shell.run gives it before each call
        os.chown(workspace, found.user.uid, found.user.gid)
    runtime = ShellRuntime(config)
    catalog = ToolCatalog([runtime])
    cases: dict[str, Callable[[], None]] = {
        "ceiling": lambda: ceiling_call(true, workspace, config),
        "bwrap": lambda: bwrap_call(true, workspace, config, found),
        "shell": lambda: shell_call(catalog, workspace),
    }
    for case in cases.values():  # warm-up: page cache, imports
        timed(case, 5)
    best: dict[str, list[float]] = {}
    for _ in range(args.rounds):  # interleaved, so machine noise hits every case alike
        for name, case in cases.items():
            ms = timed(case, args.calls)
            if name not in best or statistics.median(ms) < statistics.median(best[name]):
                best[name] = ms
    base = statistics.median(best["ceiling"])
    shell = statistics.median(best["shell"])
    print(f"calls      {args.calls} per case per round, best of {args.rounds} interleaved rounds")
    show("ceiling", "Popen(true): pipes, rlimits, scrubbed env (unconfined)", best["ceiling"])
    show(
        "bwrap",
        "bwrap + shell.run's profile, true (no reel code)",
        best["bwrap"],
        f"ratio {base / statistics.median(best['bwrap']):.2f}",
    )
    show(
        "shell.run",
        "catalog.execute shell.run ['true'], sandboxed",
        best["shell"],
        f"ratio {base / shell:.2f}",
    )
    overhead = shell - base
    overhead_p95 = p(best["shell"], 95) - p(best["ceiling"], 95)
    print(
        f"{verdict(overhead < TARGET_OVERHEAD_MS)}       sandboxed shell.run costs under "
        f"{TARGET_OVERHEAD_MS:.0f} ms more than an unconfined spawn: +{overhead:.2f} ms (p50), "
        f"+{overhead_p95:.2f} ms (p95)"
    )
    mcp_line(work, args.calls)
    parallel_line(work, args.rounds)
    search_run(work, args)
    return 0


TARGET_PARALLEL = 3.0
SLOW_READ_S = 0.5


def parallel_line(work: Path, rounds: int) -> None:
    """Four slow reads in one turn: run at once (limit 4) against one by one (limit 1)."""
    import http.server
    import threading

    from actors import ActorsConfig, Node, RunBudgets, ToolGate
    from actors.messages import StartRun
    from events import Journal, NodeKey
    from policies import PolicyEngine
    from tools import build_catalog
    from transports.models import DeterministicProvider

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(SLOW_READ_S)
            body = b"read"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/slow"
    policies = work / "parallel-policies"
    policies.mkdir()
    (policies / "reads.cedar").write_text(
        'permit (principal, action == Action::"tool.execute", resource == Tool::"http.fetch");\n'
    )
    engine = PolicyEngine.load(policies)
    text = "four reads\n" + "\n".join(
        f'/tool http.fetch {{"url": "{url}?n={n}"}}' for n in range(1, 5)
    )
    nodes: dict[int, tuple[Node, Journal]] = {}
    for limit in (4, 1):
        root = work / f"parallel-{limit}"
        (root / "workspace").mkdir(parents=True)
        tools = ToolsConfig(
            http_allowlist=("127.0.0.1",),
            http_allow_private=("127.0.0.1/32",),
            workspace_dir=str(root / "workspace"),
        )
        journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "node.key"))
        node = Node(
            journal=journal,
            provider=DeterministicProvider(),
            catalog=build_catalog(tools),
            gate=ToolGate(engine, {"http.fetch": "always_allow"}),
            workspace=root / "workspace",
            config=ActorsConfig(budgets=RunBudgets(max_parallel_tool_calls=limit)),
        )
        node.start()
        nodes[limit] = (node, journal)

    def one_run(limit: int) -> float:
        node, journal = nodes[limit]
        started = time.perf_counter()
        ticket = node.ask(StartRun(text=text, create=True), timeout=60)
        while True:
            head = journal.committed_position
            kinds = [s.kind for s in journal.read_correlated(ticket.run_id)]
            if "run.completed" in kinds:
                assert kinds.count("tool.completed") == 4, kinds
                return (time.perf_counter() - started) * 1000
            assert not {"run.failed", "run.cancelled"} & set(kinds), kinds
            journal.wait_for(head, timeout=0.05)

    try:
        one_run(4), one_run(1)  # warm-up
        times: dict[int, list[float]] = {4: [], 1: []}
        for _ in range(rounds):  # alternated, so machine noise hits both alike
            for limit in (4, 1):
                times[limit].append(one_run(limit))
    finally:
        for node, journal in nodes.values():
            node.stop(grace_s=0.5)
            journal.close()
        server.shutdown()
    together, alone = statistics.median(times[4]), statistics.median(times[1])
    print(
        f"{'parallel':<10} {'4 reads of ' + str(SLOW_READ_S) + ' s in one turn, at once':<52} "
        f"p50 {together:8.1f} ms"
    )
    print(f"{'sequential':<10} {'the same, max_parallel_tool_calls = 1':<52} p50 {alone:8.1f} ms")
    ratio = alone / together
    print(
        f"{verdict(ratio >= TARGET_PARALLEL)}       four slow reads run at once at least "
        f"{TARGET_PARALLEL:.0f}x faster than one by one: {ratio:.2f}x (median of {rounds})"
    )


TARGET_MCP_RATIO = 1.5


def mcp_line(work: Path, calls: int) -> None:
    """The MCP call's overhead over the SDK alone, both on a warm server."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.tools.mcp.staged import staged
    from tools.build import build_catalog
    from tools.mcp.config import McpConfig, McpServerConfig, McpToolConfig

    venv, servers = REPO / ".venv-mcp-servers", REPO / "tests" / "tools" / "mcp" / "servers"
    if not (venv / "bin" / "python").exists():
        print("mcp        skipped: no .venv-mcp-servers")
        return
    # Copies the sandbox can bind wherever the checkout lives (under /tmp or a 0700 directory
    # it cannot), as the tests stage them.
    venv, servers = staged(venv), staged(servers)
    python, script = venv / "bin" / "python", servers / "probe_server.py"
    server = McpServerConfig(
        command=str(python),
        args=(str(script),),
        read_only_paths=(str(venv), str(servers)),
        tools={"add": McpToolConfig()},
        start_timeout_s=60,
    )
    config = ToolsConfig(workspace_dir=str(work / "workspace"), shell_hidden_paths=(str(work),))
    catalog = build_catalog(
        config, mcp=McpConfig(servers={"probe": server}), mcp_state_dir=work / "mcp"
    )
    try:
        args = catalog.validate("mcp.probe.add", {"a": 1, "b": 2})

        def reel_call() -> None:
            ctx = ExecutionContext.start(work, 30.0)
            assert catalog.execute("mcp.probe.add", args, ctx).ok

        timed(reel_call, 5)
        reel = timed(reel_call, calls)
    finally:
        catalog.close()

    async def direct() -> list[float]:
        params = StdioServerParameters(command=str(python), args=[str(script)])
        async with Client(params, mode="legacy") as client:
            out: list[float] = []
            for i in range(calls + 5):
                started = time.perf_counter()
                await client.call_tool("add", {"a": 1, "b": 2})
                if i >= 5:
                    out.append((time.perf_counter() - started) * 1000)
            return out

    sdk = asyncio.run(direct())
    ratio = statistics.median(reel) / statistics.median(sdk)
    show("sdk", "Client.call_tool add, warm stdio server (unconfined)", sdk)
    show("mcp", "catalog.execute mcp.probe.add, warm, sandboxed", reel, f"ratio {ratio:.2f}")
    print(
        f"{verdict(ratio <= TARGET_MCP_RATIO)}       an MCP call costs at most "
        f"{TARGET_MCP_RATIO}x the SDK's own call: {ratio:.2f}x (p50)"
    )


def search_run(work: Path, args: argparse.Namespace) -> None:
    """fs.search and the checkpoint tree walk over ``args.search_files`` files (recorded)."""
    tree = work / "search"
    filler = "".join(f"line {i} of ordinary text, nothing to see here\n" for i in range(20))
    for i in range(args.search_files):
        folder = tree / f"d{i // 100:03}"
        if i % 100 == 0:
            folder.mkdir(parents=True)
        extra = "the needle_42 is here\n" if i % 100 == 7 else ""
        (folder / f"f{i:05}.txt").write_text(filler + extra)
    catalog = ToolCatalog([FileRuntime(ToolsConfig())])
    for label, arguments in (
        ("literal", {"pattern": "needle_42", "literal": True, "max_results": 200}),
        ("regex", {"pattern": r"needle_\d+ is", "max_results": 200}),
    ):
        ms: list[float] = []
        for _ in range(args.rounds):
            ctx = ExecutionContext.start(tree, 60)
            started = time.perf_counter()
            result = catalog.execute("fs.search", catalog.validate("fs.search", arguments), ctx)
            ms.append((time.perf_counter() - started) * 1000)
            assert result.ok, result.error
        hits = result.output.count('"line"')
        what = f"{label} over {args.search_files} files ({hits} matches)"
        print(f"{'fs.search':<10} {what:<52} p50 {statistics.median(ms):6.2f} ms")
    walker = Checkpointer(
        BlobStore(work / "blobs", 1 << 40), scan_max_files=1 << 20, file_max_bytes=1 << 20
    )
    for label in ("first (all hashed, stored)", "repeat (nothing moved)"):
        started = time.perf_counter()
        snap = walker.snapshot(tree, None)
        walker.changes(tree, snap)
        took = (time.perf_counter() - started) * 1000
        what = f"tree walk before+after a call, {label}"
        print(f"{'checkpoint':<10} {what:<52} {took:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=100, help="calls per case per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--search-files", type=int, default=10_000, help="files fs.search reads")
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / ".cache" / "bench",
        help="the workspace goes in a new directory under this one",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tools-", dir=args.dir))
    try:
        code = run(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
