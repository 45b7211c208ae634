"""Which build of reel is running: the one home of the version every surface shows (``reel
--version``, the node's ready line, ``/healthz``, ``reel_build_info`` in ``/metrics``, the OpenAPI
``info.version`` and the ``reel-version`` metadata of every gRPC response).

:func:`version` is the installed distribution's version (``importlib.metadata``: pyproject.toml's
``version``), followed, when reel runs from a git checkout (an editable install), by ``+g`` and
the first 12 hex digits of the checkout's HEAD commit, as a PEP 440 local version:
``0.1.0+g420893d1a2b3``. The commit is read from the checkout's ``.git`` files, without running
git (a worktree's ``.git`` file and ``packed-refs`` included); whether the tree has uncommitted
edits is not told. An install from a wheel has no checkout beside it: the release alone.
"""

from __future__ import annotations

import importlib.metadata
import re
from functools import cache
from pathlib import Path

DISTRIBUTION = "reel"
CHECKOUT = Path(__file__).resolve().parent.parent
"""Where the source tree stands when reel is installed editable (its ``pyproject.toml``)."""
COMMIT = re.compile(r"[0-9a-f]{40}")


@cache
def version() -> str:
    """``<release>`` or ``<release>+g<commit[:12]>`` (see the module's docstring)."""
    try:
        release = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a tree nobody installed
        release = "0+unknown"
    commit = revision()
    return f"{release}+g{commit[:12]}" if commit is not None else release


@cache
def revision() -> str | None:
    """The HEAD commit of the checkout reel runs from, or None (not a checkout, unreadable)."""
    if not (CHECKOUT / "pyproject.toml").is_file():
        return None
    try:
        return head_commit(CHECKOUT / ".git")
    except (OSError, UnicodeDecodeError):
        return None


def head_commit(git: Path) -> str | None:
    """The commit ``HEAD`` names in the git directory ``git`` (or a worktree's ``.git`` file)."""
    if git.is_file():  # a worktree: "gitdir: <its directory in the main repository>"
        pointer = git.read_text().strip().removeprefix("gitdir: ")
        git = (git.parent / pointer).resolve()
    head = (git / "HEAD").read_text().strip()
    if not head.startswith("ref: "):  # detached
        return head if COMMIT.fullmatch(head) else None
    ref = head.removeprefix("ref: ")
    common = git
    if (git / "commondir").is_file():  # a worktree's refs live in the main repository
        common = (git / (git / "commondir").read_text().strip()).resolve()
    for base in (git, common):
        if (base / ref).is_file():
            commit = (base / ref).read_text().strip()
            return commit if COMMIT.fullmatch(commit) else None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            commit, _, name = line.partition(" ")
            if name == ref and COMMIT.fullmatch(commit):
                return commit
    return None
