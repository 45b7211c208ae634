"""Opt-in checks against a real model server; see test_llama_cpp.py and prepare.sh."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "llm: needs a real local model server (set REEL_TEST_LLM=1; see tests/llm)"
    )
