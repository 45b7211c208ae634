"""The benchmarks run as scripts (``python bench/<name>.py``), which puts ``bench/`` first on
``sys.path``: a script named like a module anything imports (the standard library's ``http``,
grpcio's ``grpc``, reel's ``tools``) shadows it, and a benchmark fails on an import deep inside
aiohttp or urllib. Each name in ``bench/`` must therefore be importable as nothing else."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _shadowed(name: str) -> bool:
    """Whether ``name`` names a top-level module or package importable without ``bench/``."""
    if name in sys.stdlib_module_names:
        return True
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if Path(p or ".").resolve() != BENCH]
    try:
        return importlib.util.find_spec(name) is not None
    finally:
        sys.path[:] = saved


def test_no_benchmark_is_named_like_a_module_it_could_shadow() -> None:
    names = sorted(
        p.stem if p.is_file() else p.name
        for p in BENCH.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    )
    assert "journal" in names  # the listing found the scripts
    assert [n for n in names if _shadowed(n)] == []


def test_the_check_sees_a_shadowing_name() -> None:
    assert _shadowed("http") and _shadowed("grpc") and _shadowed("tools")
    assert not _shadowed("http_reads")
