"""shell.run against the host's kernel state, from a node that is root and from one that is not.

Inside bubblewrap's user namespace a program is whoever started bwrap; when that was host
root, ``/proc/sys`` and ``/proc/sysrq-trigger`` were writable (one approved ``tee`` changed a
host sysctl; ``kernel.core_pattern`` would have run a program of the caller's choosing as
host root). Every case runs twice: in this process (root in CI) and in a node run as uid
65534 (`tests.tools.unprivileged`), and asserts on what the host sees afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.tools import unprivileged
from tests.tools.sandboxkit import survivors, unique_seconds
from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.sandbox import _probe
from tools.seccomp import REFUSED, _compiled
from tools.shell import ShellRuntime

pytestmark = pytest.mark.usefixtures("sandbox_required")

CANARY = "HOST-CANARY-5b1e"
WRITERS = ("tee", "dd", "cp", "sh", "python3")
ALLOWED = {
    "shell_allowlist": (*WRITERS, "sleep", "cat"),
    "shell_allowed_wrappers": ("sh", "python3"),
}
SYSCTLS = ("/proc/sys/kernel/printk_ratelimit_burst", "/proc/sys/kernel/core_pattern")
TARGETS = (
    *SYSCTLS,
    "/proc/sysrq-trigger",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/fs/protected_hardlinks",
    "/proc/self/oom_score_adj",
    "/proc/1/comm",
    "/sys/kernel/uevent_helper",
)
"""Files whose write would reach the host (sysctls, sysrq, /sys) or the sandbox's own /proc."""


class Caller:
    """Where shell.run is called from: this process, or a node run as uid 65534."""

    def __init__(self, mode: str, tmp_path: Path, public: Path) -> None:
        self.mode = mode
        if mode == "this-process":
            self.data = tmp_path / "data"
            self.workspace = self.data / "workspace"
            self.workspace.mkdir(parents=True)
            (self.data / "admin.token").write_text(CANARY)
            self.lib: Path | None = None
        else:
            reason = unprivileged.unavailable()
            if reason is not None:
                pytest.skip(reason)
            self.lib = unprivileged.stage(public)
            self.data, self.workspace = unprivileged.node_dirs(public, CANARY)

    @property
    def sandbox_uid(self) -> int:
        """The host uid the program must run as."""
        if self.mode == "this-process" and os.geteuid() != 0:
            return os.geteuid()
        return ToolsConfig().shell_uid if self.mode == "this-process" else unprivileged.NOBODY

    def run(
        self, calls: list[dict[str, Any]], timeout_s: float = 20, **config: Any
    ) -> list[unprivileged.Outcome]:
        config = {**ALLOWED, **config}
        if self.lib is not None:
            reason, outcomes = unprivileged.run_as_nobody(
                self.lib, self.workspace, calls, timeout_s, **config
            )
            assert reason is None, reason
            return outcomes
        runtime = ShellRuntime(ToolsConfig(workspace_dir=str(self.workspace), **config))
        assert runtime.unavailable is None, runtime.unavailable
        catalog = ToolCatalog([runtime])
        results = []
        for call in calls:
            ctx = ExecutionContext.start(self.workspace, timeout_s)
            r = catalog.execute("shell.run", catalog.validate("shell.run", call), ctx)
            results.append(unprivileged.Outcome(r.ok, r.output, r.error, r.error_kind))
        return results


@pytest.fixture(params=["this-process", "as-nobody"])
def node(request: pytest.FixtureRequest, tmp_path: Path, public_tmp: Path) -> Caller:
    return Caller(str(request.param), tmp_path, public_tmp)


def text(outcome: unprivileged.Outcome) -> str:
    body: dict[str, Any] = msgspec.json.decode(outcome.output)
    return f"{body['stdout']}{body['stderr']}"


def host_values() -> dict[str, str]:
    return {path: Path(path).read_text() for path in SYSCTLS}


@contextlib.contextmanager
def host_unchanged() -> Iterator[None]:
    """The host's sysctls before and after are the same; restores them if a case failed."""
    before = host_values()
    try:
        yield
    finally:
        after = host_values()
        for path, value in before.items():
            if after[path] != value:
                Path(path).write_text(value)
        assert after == before


# --- who the program is --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_program_is_an_unprivileged_host_user(node: Caller) -> None:
    marker = unique_seconds()
    seen: list[dict[str, str]] = []

    def watch() -> None:
        deadline = time.monotonic() + 15
        while not seen and time.monotonic() < deadline:
            for pid in survivors(marker):  # bwrap's argv holds the marker too: skip it
                with contextlib.suppress(OSError):
                    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
                    status = {k: v.strip() for k, v in (ln.split(":", 1) for ln in lines)}
                    if status["Name"] == "sleep":
                        seen.append(status)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    node.run([{"argv": ["sleep", marker]}], timeout_s=3)
    watcher.join()
    assert seen, "the program was never seen running"
    uid = str(node.sandbox_uid)
    for status in seen:
        assert status["Uid"].split() == [uid] * 4, status["Uid"]
        assert status["Gid"].split()[0] != "0"
        assert status["Groups"] in ("", uid)
        assert status["CapEff"] == status["CapPrm"] == "0000000000000000"
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"


# --- /proc and /sys ------------------------------------------------------------------------

WALK = """
import os
count, writable = 0, []
for top in ("/proc", "/sys"):
    for root, dirs, files in os.walk(top, followlinks=False):
        for name in files:
            path = os.path.join(root, name)
            count += 1
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
            except OSError:
                continue
            os.close(fd)
            writable.append(path)
print(count, writable)
"""


def test_no_file_under_proc_or_sys_is_writable(node: Caller) -> None:
    with host_unchanged():
        (outcome,) = node.run([{"argv": ["python3", "-c", WALK]}])
    assert outcome.ok, outcome.error
    count, writable = text(outcome).split(" ", 1)
    assert writable.strip() == "[]"
    assert int(count) > 500  # it walked /proc/sys and the sandbox's processes


PY_WRITE = """
import sys
for target in sys.argv[1:]:
    try:
        with open(target, "w") as out:
            out.write("11\\n")
        print(target, "written")
    except OSError as exc:
        print(target, exc.strerror)
"""


def _writes(writer: str) -> list[dict[str, Any]]:
    """Calls that make ``writer`` write to every target (``tee`` alone, as in the finding)."""
    if writer == "tee":
        return [{"argv": ["tee", *TARGETS], "stdin": "11\n"}]
    if writer == "dd":
        return [{"argv": ["dd", f"of={t}"], "stdin": "11\n"} for t in TARGETS]
    if writer == "cp":
        return [{"argv": ["cp", "payload", t]} for t in TARGETS]
    if writer == "sh":
        return [{"argv": ["sh", "-c", "".join(f"echo 11 > {t}; " for t in TARGETS)]}]
    return [{"argv": ["python3", "-c", PY_WRITE, *TARGETS]}]


@pytest.mark.parametrize("writer", WRITERS)
def test_no_writer_reaches_host_kernel_settings(node: Caller, writer: str) -> None:
    (node.workspace / "payload").write_text("11\n")
    if node.lib is not None:
        os.chown(node.workspace / "payload", unprivileged.NOBODY, unprivileged.NOBODY)
    with host_unchanged():
        outcomes = node.run(_writes(writer))
    said = "".join(text(o) for o in outcomes)
    assert "written" not in said
    refusals = ("Read-only file system", "No such file", "nonexistent", "Permission denied")
    assert sum(said.count(why) for why in refusals) >= len(TARGETS), said
    if writer != "python3":  # the script reports each refusal and exits 0
        assert not any(o.ok for o in outcomes), said


# --- system calls --------------------------------------------------------------------------

SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    nr = {"ptrace": 101, "add_key": 248, "keyctl": 250, "unshare": 272, "bpf": 321,
          "perf_event_open": 298, "io_uring_setup": 425, "mount": 165, "userfaultfd": 323,
          "setns": 308, "clock_settime": 227, "ioctl": 16}[name]
    ctypes.set_errno(0)
    result = libc.syscall(nr, *args)
    return result, ctypes.get_errno()
found = {
    "ptrace": call("ptrace", 0, 0, 0, 0),
    "add_key": call("add_key", b"user", b"reel", b"x", 1, -3),
    "keyctl": call("keyctl", 0, -3, 0),
    "unshare": call("unshare", 0x10000000),
    "bpf": call("bpf", 0, 0, 0),
    "perf_event_open": call("perf_event_open", bytes(128), 0, -1, -1, 0),
    "io_uring_setup": call("io_uring_setup", 1, bytes(120)),
    "mount": call("mount", b"none", b"/tmp", b"tmpfs", 0, 0),
    "userfaultfd": call("userfaultfd", 0),
    "setns": call("setns", 0, 0),
    "clock_settime": call("clock_settime", 0, bytes(16)),
    "ioctl": call("ioctl", 0, 0x5412, b"x"),
}
print(__import__("json").dumps({k: v[1] if v[0] == -1 else "ok" for k, v in found.items()}))
"""


def test_the_seccomp_filter_refuses_what_a_tool_never_needs(node: Caller) -> None:
    (outcome,) = node.run([{"argv": ["python3", "-c", SYSCALLS], "stdin": "x"}])
    assert outcome.ok, outcome.error
    refused = json.loads(text(outcome))
    assert refused == dict.fromkeys(refused, errno.EPERM)
    assert {k for k in refused if k != "ioctl"} <= set(REFUSED)


def test_without_the_filter_the_same_calls_succeed(tmp_path: Path) -> None:
    """The control: the probe script is able to tell (ptrace and add_key work unconfined)."""
    done = subprocess.run(
        ["/usr/bin/python3", "-c", SYSCALLS], capture_output=True, text=True, timeout=30
    )
    found = json.loads(done.stdout)
    assert found["ptrace"] == "ok" and found["add_key"] == "ok"


def test_without_libseccomp_shell_run_is_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compiled.cache_clear()
    _probe.cache_clear()
    monkeypatch.setitem(sys.modules, "pyseccomp", None)
    try:
        runtime = ShellRuntime(ToolsConfig(shell_allowlist=("true",), workspace_dir=str(tmp_path)))
        assert runtime.unavailable is not None
        assert runtime.unavailable.startswith("libseccomp is not usable")
        assert runtime.specs()[0].default_posture == "disabled"
    finally:
        _compiled.cache_clear()
        _probe.cache_clear()


# --- processes and disk --------------------------------------------------------------------

FORKS = """
import os, time
count = 0
try:
    while count < 400:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        count += 1
except OSError as exc:
    print(count, exc.errno)
else:
    print(count, 0)
"""


@pytest.mark.timeout(60)
def test_a_fork_burst_is_bounded(node: Caller) -> None:
    (outcome,) = node.run([{"argv": ["python3", "-c", FORKS]}], shell_max_processes=16)
    count, code = (int(x) for x in text(outcome).split())
    assert code == errno.EAGAIN
    assert count < 16


WRITE = """
import sys
size, files = int(sys.argv[1]), int(sys.argv[2])
block = b"x" * (1 << 20)
for i in range(files):
    with open(f"f{i}", "wb") as out:
        for _ in range(size):
            out.write(block)
print("done")
"""


def _bytes_in(directory: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


@pytest.mark.timeout(120)
def test_a_call_cannot_fill_the_disk(tmp_path: Path) -> None:
    node = Caller("this-process", tmp_path, tmp_path)
    bound = 32 * 1024 * 1024
    (stopped,) = node.run([{"argv": ["python3", "-c", WRITE, "4", "128"]}], shell_write_bytes=bound)
    assert (stopped.ok, stopped.error_kind) == (False, "limit")
    assert stopped.error == (
        f"the call wrote more than shell_write_bytes ({bound} bytes) to the workspace; "
        "sandbox killed"
    )
    assert "done" not in text(stopped)
    assert _bytes_in(node.workspace) < 256 * 1024 * 1024  # 512 MiB were asked for
    for path in node.workspace.iterdir():
        path.unlink()
    # Done before the next poll: still reported, as the bound was crossed.
    (quick,) = node.run([{"argv": ["python3", "-c", WRITE, "8", "5"]}], shell_write_bytes=bound)
    assert quick.error_kind == "limit" and "shell_write_bytes" in (quick.error or "")


@pytest.mark.timeout(120)
def test_a_call_cannot_exhaust_inodes(tmp_path: Path) -> None:
    node = Caller("this-process", tmp_path, tmp_path)
    script = "import os\nfor i in range(20000): open(f'e{i}', 'w').close()\nprint('done')"
    (outcome,) = node.run([{"argv": ["python3", "-c", script]}], shell_write_files=500)
    assert outcome.error_kind == "limit"
    assert "shell_write_files (500 files)" in (outcome.error or "")


# --- the workspace belongs to the sandbox's user (a root node) -----------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="a node that is not root runs the sandbox as itself")
def test_a_root_node_gives_the_workspace_to_the_sandbox_user(tmp_path: Path) -> None:
    node = Caller("this-process", tmp_path, tmp_path)
    uid = ToolsConfig().shell_uid
    (node.workspace / "notes.txt").write_text("by root\n")
    (node.workspace / "sub").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text(CANARY)
    os.link(outside, node.workspace / "linked.txt")
    (done,) = node.run(
        [
            {
                "argv": [
                    "sh",
                    "-c",
                    "echo more >> notes.txt; echo new > sub/made; echo x >> linked.txt",
                ]
            }
        ]
    )
    assert (node.workspace / "notes.txt").read_text() == "by root\nmore\n"
    assert (node.workspace / "sub" / "made").stat().st_uid == uid
    assert (node.workspace / "notes.txt").stat().st_uid == uid
    # A second name of a file may lie outside the workspace: it never changes hands.
    assert outside.stat().st_uid == 0 and outside.read_text() == CANARY
    assert "Permission denied" in text(done)


def test_the_launcher_looks_up_no_symbol_between_fork_and_exec() -> None:
    """A root node's child runs `tools.sandbox_user.launcher` between fork and exec, where a
    first ``CDLL`` attribute would run ``dlsym`` (not async-signal-safe: the loader's lock may
    be held by another thread at the fork). ctypes keeps a looked-up function on the library
    object, so the node's own copy holds both before any fork."""
    from tools import sandbox_user

    assert {"unshare", "mount"} <= set(vars(sandbox_user._libc))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another user's files")
def test_files_of_other_users_keep_their_owner(tmp_path: Path) -> None:
    node = Caller("this-process", tmp_path, tmp_path)
    theirs = node.workspace / "theirs.txt"
    theirs.write_text("alice's\n")
    os.chown(theirs, 4242, 4242)
    node.run([{"argv": ["cat", "theirs.txt"]}])
    assert theirs.stat().st_uid == 4242


def test_the_unprivileged_helper_needs_nothing_from_the_checkout(public_tmp: Path) -> None:
    """Issue 28: the child runs from its staged copy alone. Here the checkout is hidden under
    an empty tmpfs (a private mount namespace), as unreadable as one in a 0700 directory."""
    reason = unprivileged.unavailable() or (None if shutil.which("unshare") else "no unshare")
    if reason is not None:
        pytest.skip(reason)
    lib = unprivileged.stage(public_tmp)
    repo = Path(__file__).resolve().parents[2]
    probe = "import tools.shell, msgspec, pyseccomp; print(tools.__file__)"
    child = [*unprivileged.SETPRIV, unprivileged.PYTHON, "-s", "-c", probe]
    hide = f"mount -t tmpfs none {shlex.quote(str(repo))} && exec {shlex.join(child)}"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib)},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(lib / "tools" / "__init__.py")
