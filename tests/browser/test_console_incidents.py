"""The console's open-incidents banner, in headless Chromium against a real node whose watchdog
watches a deliberately stuck tool: shown (domain, subject, since) to principals that may read
incidents, never to an agent, and gone once the incident resolves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from actors.messages import CancelRun, StartRun
from tests.browser.console_node import ARTIFACTS, Console
from tests.browser.test_console_principals import log_in, log_out, make_token
from transports.access.auth import load_or_create_token
from transports.config import NodeConfig, ToolsSection, WatchdogSection
from transports.http import start_http
from transports.runtime import open_runtime


@pytest.fixture
def watched(data_dir: Path) -> Iterator[Console]:
    """A node whose watchdog calls a run stalled after 0.5 s without a tape entry."""
    config = NodeConfig(
        tools=ToolsSection(shell_allowlist=("echo",)),
        watchdog=WatchdogSection(run_stall_s=0.5, interval_s=0.1),
    )
    runtime = open_runtime(data_dir, config=config)
    token = load_or_create_token(data_dir)
    server = start_http(runtime, host="127.0.0.1", port=0, token=token)
    try:
        yield Console(url=server.url, token=token, runtime=runtime)
    finally:
        try:
            server.close()
        finally:
            runtime.close(1.0)


def test_open_incidents_banner(watched: Console, console_page: Page) -> None:
    page = console_page
    log_in(page, watched, watched.token)
    banner = page.get_by_test_id("incidents")
    expect(banner).to_be_hidden()  # nothing is wrong yet

    # Stuck until cancelled (30 s: the cap): a 12 s sleep ended by itself, and the incident
    # with it, before a loaded machine had logged in as the three principals below.
    ticket = watched.runtime.node.ask(
        StartRun(text='/tool sleep {"seconds": 30}', create=True), timeout=10
    )
    expect(banner).to_be_visible(timeout=10_000)
    item = banner.get_by_test_id("incident")
    expect(item).to_have_count(1)
    expect(item).to_have_attribute("data-domain", "run")
    expect(item).to_contain_text("run")
    expect(item).to_contain_text("since")
    expect(page.get_by_test_id("incidents-count")).to_have_text("1")
    assert "seconds without tape entry" in (item.get_attribute("title") or "")
    page.screenshot(path=str(ARTIFACTS / "console-incidents.png"))
    item.get_by_role("link").click()  # a run incident opens the run's tape
    expect(page.get_by_test_id("run-id")).to_contain_text(ticket.run_id[-6:])

    viewer = make_token(watched, "user:vera", "viewer")
    agent = make_token(watched, "agent:app", "agent")
    log_out(page)
    log_in(page, watched, viewer)
    expect(banner).to_be_visible(timeout=10_000)
    log_out(page)
    log_in(page, watched, agent)
    page.wait_for_timeout(3500)  # more than one poll: an agent never asks, never sees
    expect(banner).to_be_hidden()
    log_out(page)

    log_in(page, watched, watched.token)
    expect(banner).to_be_visible(timeout=10_000)
    watched.runtime.node.ask(CancelRun(run_id=ticket.run_id), timeout=10)
    expect(banner).to_be_hidden(timeout=25_000)  # the run ended: the incident is resolved
