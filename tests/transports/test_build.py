"""One version everywhere: :mod:`transports.build` names the build (release, and the commit of the
checkout it runs from), and every surface shows that one string: ``reel --version``, the node's
ready line, ``/healthz``, ``reel_build_info`` in ``/metrics``, the OpenAPI ``info.version`` and
the ``reel-version`` metadata of gRPC responses (each asserted where its surface is tested; the
CLI and the commit here)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from tests import processes
from transports import build
from transports.build import head_commit, version

REEL = Path(sys.executable).with_name("reel")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "a").write_text("a")
    git(path, "add", "a")
    git(path, "commit", "-q", "-m", "one")
    return path


def test_the_version_is_the_release_and_the_checkout_commit() -> None:
    release = importlib.metadata.version("reel")
    commit = build.revision()
    if commit is None:  # installed from a wheel: no checkout beside it
        assert version() == release
    else:
        assert commit == git(build.CHECKOUT, "rev-parse", "HEAD")
        assert version() == f"{release}+g{commit[:12]}"


def test_head_commit_of_a_branch_detached_packed_and_a_worktree(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    assert head_commit(repo / ".git") == first
    (repo / "a").write_text("b")
    git(repo, "commit", "-q", "-am", "two")
    second = git(repo, "rev-parse", "HEAD")
    assert head_commit(repo / ".git") == second
    git(repo, "pack-refs", "--all")  # the branch's ref now lives in packed-refs only
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert head_commit(repo / ".git") == second
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), first)
    assert (tmp_path / "wt" / ".git").is_file()
    assert head_commit(tmp_path / "wt" / ".git") == first
    git(repo, "checkout", "-q", "--detach", first)
    assert head_commit(repo / ".git") == first


def test_no_commit_where_there_is_no_git(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        head_commit(tmp_path / ".git")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/nowhere\n")
    assert head_commit(tmp_path / ".git") is None


def test_reel_version_prints_it_and_exits_0() -> None:
    done = processes.run(
        [str(REEL), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"reel {version()}\n", "")
