"""Fixtures for the web console tests: Debian's Chromium driven by playwright, and a real node
serving the HTTP API and the console.

Without ``/usr/bin/chromium`` the tests fail (CI must run them), unless
``REEL_ALLOW_NO_BROWSER=1`` says skipping them is acceptable on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.browser.console_node import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HOOK_SECRET_ENV,
    Console,
    Stocked,
    running_console,
    stocked_console,
)


@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (Debian's chromium package: make pytest installs it)"
        if os.environ.get("REEL_ALLOW_NO_BROWSER") == "1":
            pytest.skip(f"{reason}; skipped because REEL_ALLOW_NO_BROWSER=1")
        pytest.fail(f"{reason}; set REEL_ALLOW_NO_BROWSER=1 to skip the browser tests instead")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def chromium_browser(playwright_instance: Playwright) -> Iterator[Browser]:
    browser = playwright_instance.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def console_page(chromium_browser: Browser) -> Iterator[Page]:
    """A fresh browser context (its own sessionStorage) and page, 1440x900."""
    context = chromium_browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def console(data_dir: Path) -> Iterator[Console]:
    """A node with the HTTP API on a free loopback port (see console_node.running_console)."""
    with running_console(data_dir) as running:
        yield running


@pytest.fixture(scope="module")
def stocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stocked]:
    """A node with something on every page of the console (console_node.stocked_console), one
    per test module."""
    data = tmp_path_factory.mktemp("stocked") / "data"
    data.mkdir(mode=0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOOK_SECRET_ENV, "s" * 40)
        with stocked_console(data) as running:
            yield running
