"""README.md's quick start, run as written on a fresh data dir: the node ``make run`` starts,
the ready line it prints, each ``reel chat`` command of the second terminal (a prompt answered
where the README says one asks), and the steps that let ``shell.run`` run ``echo`` (refused on a
fresh node, still refused after the config changed until the node restarts, then asking).

The commands and the config are read from README.md and the node's command line from
``make -n run``, so the test breaks when either drifts from what reel does."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from tests.processes import REEL
from tests.transports.cli.nodekit import environment, running_node

ROOT = Path(__file__).resolve().parents[3]
PORT = re.compile(r"127\.0\.0\.1:\d+")

VERSION = re.compile(r"version \S+")


def same(line: str) -> str:
    """A ready line with its ports and version left out (the README shows one build's)."""
    return VERSION.sub("version V", PORT.sub("PORT", line))


def quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]


def blocks(section: str) -> list[tuple[str, str]]:
    """``(language, body)`` of each fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[tuple[list[str], str]]:
    """Each shell command of ``block`` as the shell splits it (a quoted string may span lines)
    and its trailing comment."""
    found: list[tuple[list[str], str]] = []
    pending = ""
    for line in block.splitlines(keepends=True):
        pending += line
        try:
            words = shlex.split(pending)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        cut = words.index("#") if "#" in words else len(words)
        found.append((words[:cut], " ".join(words[cut + 1 :])))
    assert not pending.strip(), pending
    return found


def run(home: Path, argv: list[str], comment: str) -> str:
    """Run one README command in ``home`` as its comment says it behaves; its output."""
    assert argv[0] == ".venv/bin/reel", argv
    message = argv[-1] if len(argv) > 4 else ""
    answer = None
    if "asks for approval" in comment:
        answer = "o\n"  # allow once
    elif "interactive" in comment:
        answer = "hello\n"
    done = subprocess.run(
        argv,
        cwd=home,
        env=environment(),
        input=answer,
        stdin=subprocess.DEVNULL if answer is None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "run done" in done.stdout, (argv, done)
    if answer == "o\n":
        tool = message.split()[1]
        assert f"allow {tool}?" in done.stdout, done.stdout
        assert "approval: allow once by admin" in done.stdout, done.stdout
    return done.stdout


def test_the_quick_start_runs_as_written_on_a_fresh_data_dir(tmp_path: Path) -> None:
    section = quick_start()
    # Under `make test` this runs inside make: a sub-make would print its directory lines.
    outer = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    node = shlex.split(dry.stdout.strip().splitlines()[-1])
    said = re.search(r"`make run` starts `([^`]+)`", section)
    assert said is not None and node[0] == ".venv/bin/reel"
    assert ["reel", *node[1:]] == shlex.split(said.group(1))
    # A checkout of its own: ./.venv/bin/reel is this reel, ./.reel does not exist yet.
    home = tmp_path / "checkout"
    (home / ".venv" / "bin").mkdir(parents=True)
    (home / ".venv" / "bin" / "reel").symlink_to(REEL)
    fenced = blocks(section)
    ready_line = next(body for lang, body in fenced if body.startswith("reel node ready"))
    terminal = next(body for lang, body in fenced if lang == "sh" and "reel chat" in body)
    (config,) = (body for lang, body in fenced if lang == "toml")
    (shell,) = (body for lang, body in fenced if lang == "sh" and "shell.run" in body)
    (shell_cmd,) = commands(shell)
    assert "asks for approval" in shell_cmd[1]
    # Ports of the kernel's choosing (REEL_*_PORT=0): anything else as written.
    with running_node(node, cwd=home) as ready:
        assert same(ready) == same(ready_line.strip())
        for argv, comment in commands(terminal):
            out = run(home, argv, comment)
            if argv[-1].startswith("/tool fs.write "):
                wrote = json.loads(argv[-1].removeprefix("/tool fs.write "))
                assert (home / ".reel" / "workspace" / wrote["path"]).read_text() == (
                    wrote["content"]
                ), out
        refused = run(home, shell_cmd[0], "")
        assert "is not in the shell allowlist" in refused and "allow shell.run?" not in refused
        with (home / ".reel" / "config.toml").open("a") as file:
            file.write(config)
        # Not taken up until the node restarts.
        assert "is not in the shell allowlist" in run(home, shell_cmd[0], "")
    with running_node(node, cwd=home):
        out = run(home, *shell_cmd)
        assert "shell.run -> " in out and '"stdout":"yo\\n"' in out.replace(" ", ""), out
