"""shell.run against an adversary: real bubblewrap, real processes, a node-shaped data dir.

Every case here was possible before the sandbox (``cat ../admin.token``, ``cat /etc/passwd``,
the node's ``/proc/<pid>/environ``, ``env bash -c``, a ``setsid`` child outliving the call);
each asserts on what the host sees afterwards, not only on what the tool reported.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from actors import ToolGate
from policies import PolicyEngine
from tests import processes
from tests.tools import unprivileged
from tests.tools.sandboxkit import survivors, unique_seconds, wait_for_survivors
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.shell import ShellRuntime, probe_ahead

pytestmark = pytest.mark.usefixtures("sandbox_required")

CANARY = "ADMIN-TOKEN-CANARY-7f3a"
PROGRAMS = ("cat", "ls", "echo", "true", "ln", "stat", "id", "sleep", "sh", "python3")
SHELL_PATH = ToolsConfig().shell_path


class DataDir:
    """A node's data dir: secrets beside the workspace, as ``reel node`` lays it out."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.workspace.mkdir(parents=True)
        (root / "admin.token").write_text(CANARY)
        (root / "journal.db").write_text(f"journal {CANARY}")
        (root / "node.key").write_text(f"key {CANARY}")

    def config(self, **config: object) -> ToolsConfig:
        config.setdefault("shell_allowlist", PROGRAMS)
        config.setdefault("shell_allowed_wrappers", ("sh", "python3"))
        config.setdefault("workspace_dir", str(self.workspace))
        return ToolsConfig(**config)  # type: ignore[arg-type]

    def catalog(self, **config: object) -> ToolCatalog:
        return ToolCatalog([ShellRuntime(self.config(**config))])

    def catalog_probed_ahead(self, **config: object) -> ToolCatalog:
        """`catalog`, its sandbox probe begun first on a thread of its own (as the node begins
        it: `tools.shell.probe_ahead`) and taken by the runtime."""
        tools_config = self.config(**config)
        probe_ahead(tools_config)
        return ToolCatalog([ShellRuntime(tools_config)])

    def run(
        self,
        argv: Sequence[str],
        cwd: str | None = None,
        ctx: ExecutionContext | None = None,
        **config: object,
    ) -> ToolResult:
        catalog = self.catalog(**config)
        args: dict[str, object] = {"argv": list(argv)}
        if cwd is not None:
            args["cwd"] = cwd
        return catalog.execute(
            "shell.run",
            catalog.validate("shell.run", args),
            ctx or ExecutionContext.start(self.workspace, 20),
        )


@pytest.fixture
def data(tmp_path: Path) -> DataDir:
    return DataDir(tmp_path / "data")


def out(result: ToolResult) -> str:
    body: dict[str, object] = msgspec.json.decode(result.output)
    return f"{body['stdout']}{body['stderr']}"


# --- the node's files ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "cwd"),
    [
        (["cat", "../admin.token"], None),
        (["cat", "../../admin.token"], "sub"),
        (["cat", "../journal.db"], None),
        (["cat", "ADMIN"], None),
        (["ls", "-la", "DATA"], None),
        (["cat", "/proc/self/root/DATA/admin.token"], None),
        (["cat", "/proc/1/root/DATA/admin.token"], None),
        (["cat", "/proc/1/cwd/../admin.token"], None),
        (["sh", "-c", "cat ../*.token ../node.key; cat DATA/*"], None),
    ],
)
def test_the_data_dir_is_invisible(data: DataDir, argv: list[str], cwd: str | None) -> None:
    (data.workspace / "sub").mkdir()
    argv = [a.replace("ADMIN", str(data.root / "admin.token")) for a in argv]
    argv = [a.replace("DATA", str(data.root)) for a in argv]
    result = data.run(argv, cwd=cwd)
    assert not result.ok
    assert result.error_kind == "failed", result.error  # it ran, and found nothing
    assert CANARY not in result.output
    assert "No such file" in out(result)


def test_symlinks_planted_in_the_workspace_lead_nowhere(data: DataDir) -> None:
    (data.workspace / "rel").symlink_to("../admin.token")
    (data.workspace / "abs").symlink_to(data.root / "admin.token")
    (data.workspace / "dir").symlink_to(data.root)
    (data.workspace / "root").symlink_to("/proc/self/root")
    script = "cat rel abs dir/admin.token root/" + str(data.root) + "/admin.token"
    result = data.run(["sh", "-c", script])
    assert not result.ok and CANARY not in result.output
    assert out(result).count("No such file") == 4


def test_links_out_of_the_workspace_cannot_be_made(data: DataDir) -> None:
    # Only the workspace is writable and a hard link cannot cross mounts (EXDEV).
    script = "ln /etc/ld.so.cache x && echo linked; ln /usr/bin/true y && echo linked"
    result = data.run(["sh", "-c", script])
    assert "linked" not in out(result)
    assert out(result).count("Invalid cross-device link") == 2
    assert sorted(os.listdir(data.workspace)) == []


def test_the_host_etc_is_not_there(data: DataDir) -> None:
    passwd = data.run(["cat", "/etc/passwd"])
    assert passwd.ok, passwd.error
    text = str(msgspec.json.decode(passwd.output)["stdout"])
    synthetic = {
        "root:x:0:0:root:/workspace:/usr/sbin/nologin",
        f"reel:x:{os.getuid()}:{os.getgid()}:reel:/workspace:/usr/sbin/nologin",
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
    }
    assert text.startswith("root:x:0:0:root:/workspace:/usr/sbin/nologin\n")
    assert set(text.splitlines()) <= synthetic  # no host account, home or shell
    for secret in ("/etc/shadow", "/etc/ssl/private", "/etc/hostname", "/root", "/home"):
        assert not data.run(["ls", secret]).ok, secret
    listed = data.run(["ls", "/etc"])
    names = set(str(msgspec.json.decode(listed.output)["stdout"]).split())
    assert names <= {
        "alternatives",
        "group",
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "localtime",
        "passwd",
        "protocols",
        "services",
    }


def test_only_the_workspace_is_writable(data: DataDir, tmp_path: Path) -> None:
    name = f"reel-escape-{uuid.uuid4().hex}"
    script = (
        f"echo x > /tmp/{name}; echo x > /usr/{name}; echo x > ../{name}; "
        f"echo x > /{name}; echo x > /etc/{name}; echo x > /dev/shm/{name}; "
        f"echo x > {data.root}/{name}; echo kept > /workspace/{name}"
    )
    data.run(["sh", "-c", script])
    assert (data.workspace / name).read_text() == "kept\n"
    for host in (Path("/tmp"), Path("/usr"), data.root, Path("/"), Path("/dev/shm")):
        assert not (host / name).exists(), host


# --- the node's process and environment ----------------------------------------------------


def test_the_node_environment_and_process_are_invisible(
    data: DataDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{CANARY}")
    node = os.getpid()
    script = (
        f"cat /proc/{node}/environ /proc/{os.getppid()}/environ; "
        "cat /proc/1/environ /proc/*/environ; echo; ls /proc; cat /proc/1/cmdline"
    )
    result = data.run(["sh", "-c", script])
    assert CANARY not in result.output
    text = out(result)
    assert f"/proc/{node}/environ: No such file" in text
    pids = {int(p) for p in text.split() if p.isdigit()}
    assert pids and max(pids) < 100  # the sandbox's own PID namespace
    assert str(data.root) not in text  # bwrap's options come through --args, not argv
    env = data.run(["sh", "-c", "cat /proc/self/environ | tr '\\0' '\\n'"])
    assert "OPENAI_API_KEY" not in env.output and "HOME=/workspace" in env.output


# --- network -------------------------------------------------------------------------------

CONNECT = (
    "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2); "
    "print('connected')"
)


@pytest.fixture
def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.3)
    return server


def test_no_network_unless_allowed(data: DataDir, listener: socket.socket) -> None:
    port = str(listener.getsockname()[1])
    denied = data.run(["python3", "-c", CONNECT, port])
    assert not denied.ok and "connected" not in out(denied)
    assert "ConnectionRefusedError" in out(denied)  # the sandbox's own, empty loopback
    with pytest.raises(TimeoutError):
        listener.accept()

    catalog = data.catalog(shell_network=True)
    assert catalog.spec("shell.run").capabilities == {"process.exec", "net.egress"}
    allowed = data.run(["python3", "-c", CONNECT, port], shell_network=True)
    assert allowed.ok, out(allowed)
    conn, _ = listener.accept()
    conn.close()
    listener.close()


# --- nothing outlives the call -------------------------------------------------------------

ESCAPES = {
    "background": "sleep {m} & ",
    "setsid": "setsid sleep {m} & ",
    "nohup": "nohup sleep {m} >/dev/null 2>&1 & ",
    "setsid-nohup-double-fork": "(setsid nohup sh -c 'sleep {m} &' >/dev/null 2>&1 &) ; ",
    "python-daemon": (
        'python3 -c "import os,time\nif os.fork(): os._exit(0)\nos.setsid()\n'
        "if os.fork(): os._exit(0)\nos.execvp('sleep', ['sleep', '{m}'])\" ; "
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("escape", sorted(ESCAPES))
@pytest.mark.parametrize("end", ["exit", "timeout", "cancel"])
def test_no_process_outlives_the_call(data: DataDir, escape: str, end: str) -> None:
    marker = unique_seconds()
    # Several at once: tearing a busy namespace down takes long enough to see a call that
    # returns before it is done (bwrap exits before its PID 1 has finished killing).
    script = ESCAPES[escape].format(m=marker) * 6 + ("sleep 1" if end == "exit" else "sleep 60")
    # 2 s: under load, bwrap and sh took longer than 0.8 s to start the escapes
    ctx = ExecutionContext.start(data.workspace, 2.0 if end == "timeout" else 20)
    seen: list[list[int]] = []

    def watch() -> None:
        seen.append(wait_for_survivors(marker))
        if end == "cancel":
            ctx.cancel.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    # The write bound counts every writer of the file system (tools.write_bound): on a busy
    # machine other processes' writes stopped this call; it is not what is tested here.
    result = data.run(["sh", "-c", script], ctx=ctx, shell_write_bytes=1 << 40)
    watcher.join()
    assert seen[0], "the escaping process never started"
    expected = {"exit": None, "timeout": "timeout", "cancel": "cancelled"}[end]
    assert result.error_kind == expected, result.error
    assert survivors(marker) == []


# --- exec wrappers -------------------------------------------------------------------------

WRAPPED = [
    ["env", "bash", "-c", "id"],
    ["nice", "bash", "-c", "id"],
    ["nohup", "bash", "-c", "id"],
    ["timeout", "5", "bash", "-c", "id"],
    ["xargs", "bash", "-c", "id"],
    ["find", ".", "-maxdepth", "0", "-exec", "bash", "-c", "id", ";"],
    ["sh", "-c", "id"],
    ["bash", "-c", "id"],
    ["dash", "-c", "id"],
    ["busybox", "sh", "-c", "id"],
    ["python3", "-c", "import os; os.system('id')"],
    ["perl", "-e", "system('id')"],
    ["awk", 'BEGIN { system("id") }'],
    ["sed", "-n", "1e id", "/etc/passwd"],
    ["stdbuf", "-o0", "bash", "-c", "id"],
    ["setsid", "bash", "-c", "id"],
]


@pytest.mark.parametrize("argv", WRAPPED, ids=lambda a: a[0])
def test_exec_wrappers_are_denied_unless_allowed_as_wrappers(
    data: DataDir, argv: list[str]
) -> None:
    if shutil.which(argv[0], path=SHELL_PATH) is None:
        pytest.skip(f"{argv[0]} is not installed")
    result = data.run(argv, shell_allowlist=(argv[0], "id"), shell_allowed_wrappers=())
    assert (result.ok, result.error_kind) == (False, "denied")
    assert "is an exec wrapper" in (result.error or "")
    assert "uid=" not in result.output


def test_a_wrapper_hidden_behind_a_symlink_is_denied(data: DataDir, public_tmp: Path) -> None:
    bin_dir = public_tmp / "bin"
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "harmless").symlink_to(shutil.which("python3", path=SHELL_PATH) or "")
    result = data.run(
        ["harmless", "-c", "print('ran')"],
        shell_allowlist=("harmless",),
        shell_allowed_wrappers=(),
        shell_path=f"{bin_dir}:{SHELL_PATH}",
    )
    assert result.error_kind == "denied"
    real = os.path.realpath(bin_dir / "harmless")
    assert result.error == (
        f"argv[0]: 'harmless' (resolves to {real}) is an exec wrapper: it can run programs that "
        "are not allowlisted; list it in shell_allowed_wrappers too to allow it and everything "
        "it can run"
    )


@pytest.mark.parametrize("argv0", ["/usr/bin/env", "/bin/sh", "./python3", "/usr/bin/python3"])
def test_wrappers_by_path_are_denied(data: DataDir, argv0: str) -> None:
    result = data.run([argv0, "-c", "id"], shell_allowlist=("env", "sh", "python3"))
    assert result.error_kind == "denied" and "bare executable name" in (result.error or "")


def test_an_allowed_wrapper_runs_what_it_likes_but_only_inside(data: DataDir) -> None:
    result = data.run(
        ["env", "sh", "-c", "cat ../admin.token; id -u"],
        shell_allowlist=("env",),
        shell_allowed_wrappers=("env",),
    )
    assert CANARY not in result.output and "No such file" in out(result)


# --- no sandbox: disabled, never unconfined ------------------------------------------------


def _fake_bwrap(directory: Path, message: str) -> Path:
    fake = directory / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake


def _unavailable_cases(tmp: Path, public: Path) -> dict[str, tuple[dict[str, object], str]]:
    no_bwrap = tmp / "path-without-bwrap"
    no_bwrap.mkdir()
    for name in ("sh", "true", "touch"):
        (no_bwrap / name).symlink_to(shutil.which(name) or "")
    broken = public / "broken"  # bwrap must be reachable by the sandbox's user
    broken.mkdir(mode=0o755)
    who = f"uid {ToolsConfig().shell_uid}" if os.geteuid() == 0 else "this user"
    message = "bwrap: No permissions to creating new namespace"
    return {
        "missing binary": (
            {"shell_bwrap": "/nonexistent/bwrap"},
            "bubblewrap ('/nonexistent/bwrap') was not found; install the Debian package "
            "`bubblewrap` (shell.run never runs unconfined)",
        ),
        "not on PATH": (
            {"shell_path": str(no_bwrap)},
            f"bubblewrap ('bwrap') was not found on {no_bwrap}",
        ),
        "no namespaces": (
            {"shell_bwrap": str(_fake_bwrap(broken, message))},
            f"bubblewrap cannot create its namespaces as {who}: {message}",
        ),
    }


@pytest.mark.parametrize("ahead", [False, True], ids=["probed-in-place", "probed-ahead"])
@pytest.mark.parametrize("case", ["missing binary", "not on PATH", "no namespaces"])
def test_without_a_sandbox_shell_run_is_disabled_and_never_runs(
    data: DataDir, tmp_path: Path, public_tmp: Path, case: str, ahead: bool
) -> None:
    config, reason = _unavailable_cases(tmp_path, public_tmp)[case]
    marker = tmp_path / f"ran-{uuid.uuid4().hex}"
    build = data.catalog_probed_ahead if ahead else data.catalog
    catalog = build(shell_allowlist=("sh", "touch"), **config)
    spec = catalog.spec("shell.run")
    assert spec.unavailable is not None and spec.unavailable.startswith(reason)
    assert spec.default_posture == "disabled"
    assert catalog.unavailable() == {"shell.run": spec.unavailable}
    gate = ToolGate(PolicyEngine.load(None), {"shell.run": "always_allow"})
    assert gate.posture(spec, {"shell.run": "always_allow"}) == "disabled"
    for argv in (["touch", str(marker)], ["sh", "-c", f"touch {marker}"]):
        result = catalog.execute(
            "shell.run",
            catalog.validate("shell.run", {"argv": argv}),
            ExecutionContext.start(data.workspace, 10),
        )
        assert (result.ok, result.error_kind) == (False, "denied")
        assert result.error == f"shell.run is unavailable on this node: {spec.unavailable}"
    assert not marker.exists()


def test_a_probe_begun_ahead_runs_once_and_the_runtime_takes_it(
    data: DataDir, public_tmp: Path
) -> None:
    """The node begins the probe before its journal check (`probe_ahead`); the runtime built
    while it still runs waits for it instead of probing again: bwrap (a wrapper that logs
    each start) ran once for its version and once for ``true``, and the sandbox works."""
    log = public_tmp / "bwrap.log"
    log.touch(mode=0o666)
    log.chmod(0o666)  # a root node's probe starts bwrap as the sandbox's user
    wrapper = public_tmp / "bwrap"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec {shutil.which("bwrap")} "$@"\n')
    wrapper.chmod(0o755)
    catalog = data.catalog_probed_ahead(shell_bwrap=str(wrapper))
    assert catalog.unavailable() == {}
    assert log.read_text().split() == ["--version", "--args"]
    result = catalog.execute(
        "shell.run",
        catalog.validate("shell.run", {"argv": ["echo", "in"]}),
        ExecutionContext.start(data.workspace, 10),
    )
    assert result.ok and out(result) == "in\n"
    assert log.read_text().split() == ["--version", "--args", "--args"]


def test_reel_tools_shows_why_shell_run_is_disabled(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[tools]\nshell_allowlist = ["echo"]\nshell_bwrap = "/nonexistent/bwrap"\n'
        'postures = { "shell.run" = "always_allow" }\n'
    )
    reel = str(Path(sys.executable).with_name("reel"))
    text = processes.run(
        [reel, "tools", "--data", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    (line,) = [row for row in text.stdout.splitlines() if row.startswith("shell.run")]
    assert "posture=disabled" in line
    assert "unavailable: bubblewrap ('/nonexistent/bwrap') was not found" in line
    as_json = processes.run(
        [reel, "tools", "--data", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = {row["name"]: row for row in msgspec.json.decode(as_json.stdout)}
    assert rows["shell.run"]["posture"] == "disabled"
    assert "was not found" in rows["shell.run"]["unavailable"]
    assert rows["echo"]["unavailable"] is None


# --- as an unprivileged user ---------------------------------------------------------------


def test_the_sandbox_works_for_an_unprivileged_user(public_tmp: Path) -> None:
    """The node may run as root (here) or not: as uid 65534, bwrap needs unprivileged user
    namespaces, and the same confinement holds. The child's code is staged where that user
    can read it, so this runs wherever the checkout lives (issue 28)."""
    reason = unprivileged.unavailable()
    if reason is not None:
        pytest.skip(reason)
    lib = unprivileged.stage(public_tmp)
    _, workspace = unprivileged.node_dirs(public_tmp, CANARY)
    calls = [{"argv": ["id", "-u"]}, {"argv": ["cat", "../admin.token"]}]
    unavailable, (who, token) = unprivileged.run_as_nobody(
        lib, workspace, calls, shell_allowlist=("cat", "id")
    )
    assert unavailable is None
    assert '"stdout":"65534\\n"' in who.output
    assert CANARY not in token.output and "No such file" in token.output


def test_startup_probe_is_cheap_enough_to_run_once(data: DataDir) -> None:
    started = time.monotonic()
    data.catalog(shell_tmp_bytes=12345 * 4096)  # a setting not probed before: a real probe
    assert time.monotonic() - started < 5


CRASHING_NODE = """
import sys, threading
from pathlib import Path
from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.shell import ShellRuntime
config = ToolsConfig(shell_allowlist=("sh",), shell_allowed_wrappers=("sh",))
catalog = ToolCatalog([ShellRuntime(config)])
script = f"setsid sleep {sys.argv[2]} & sleep 300"
args = catalog.validate("shell.run", {"argv": ["sh", "-c", script]})
threading.Thread(
    target=catalog.execute, args=("shell.run", args, ExecutionContext.start(Path(sys.argv[1]), 60))
).start()
"""


@pytest.mark.timeout(30)
def test_the_sandbox_dies_with_a_node_killed_by_sigkill(data: DataDir) -> None:
    marker = unique_seconds()
    repo = Path(__file__).resolve().parents[2]
    node = subprocess.Popen(
        [sys.executable, "-c", CRASHING_NODE, str(data.workspace), marker],
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    try:
        assert wait_for_survivors(marker, timeout_s=15), "the sandboxed process never started"
        node.kill()
        node.wait(10)
        deadline = time.monotonic() + 5
        while survivors(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert survivors(marker) == []
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)


def test_node_paths_under_a_system_directory_are_covered(data: DataDir) -> None:
    """A data dir under /usr (say /usr/local/var/reel) would be visible through the /usr bind:
    hidden paths under a bound directory are covered by an empty, read-only tmpfs."""
    hidden = "/usr/share/doc"
    if not os.listdir(hidden):
        pytest.skip(f"{hidden} is empty here")
    result = data.run(
        ["sh", "-c", f"ls -A {hidden}; echo x > {hidden}/x && echo wrote"],
        shell_hidden_paths=(hidden,),
    )
    assert out(result).splitlines()[0].endswith("Read-only file system")
    assert "wrote" not in out(result)
    listed = data.run(["ls", "-A", hidden], shell_hidden_paths=(hidden,))
    assert listed.ok and msgspec.json.decode(listed.output)["stdout"] == ""
    shown = data.run(["ls", "-A", hidden])  # the same directory, not hidden: visible
    assert msgspec.json.decode(shown.output)["stdout"] != ""


def test_a_shell_path_inside_the_data_dir_disables_shell_run(data: DataDir) -> None:
    bin_dir = data.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "echo").symlink_to(shutil.which("echo") or "")
    catalog = data.catalog(
        shell_path=f"{bin_dir}:{SHELL_PATH}", shell_hidden_paths=(str(data.root),)
    )
    reason = catalog.spec("shell.run").unavailable
    assert reason == (
        f"sandbox: {os.path.realpath(bin_dir)} would be visible but lies inside the node's "
        f"{os.path.realpath(data.root)}"
    )
