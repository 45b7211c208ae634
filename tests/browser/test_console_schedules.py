"""The console's schedules page, in headless Chromium against a real node: each schedule with
when it fires, as whom and its status; Pause, Resume, Run now and Delete for whoever may manage
it (the node decides again), none of them for a viewer."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.console_node import Console, call, eventually
from tests.browser.test_console_principals import log_in, log_out, make_token


def runs(console: Console) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = call(console, "GET", "/v1/runs?limit=50")["items"]
    return items


def test_schedules_are_listed_paused_resumed_fired_and_deleted(
    console: Console, console_page: Page
) -> None:
    page = console_page
    body = {
        "name": "report",
        "cron": "30 2 * * *",
        "tz": "Europe/Berlin",
        "session_key": "reports",
        "text": "the nightly report",
    }
    call(console, "POST", "/v1/schedules", body)
    viewer = make_token(console, "user:vera", "viewer")
    log_in(page, console, viewer)
    page.get_by_test_id("nav-schedules").click()
    row = page.get_by_test_id("schedule-row")
    expect(row).to_have_attribute("data-status", "active")
    expect(row).to_contain_text("30 2 * * * (Europe/Berlin)")
    expect(row).to_contain_text("the nightly report")
    expect(row.get_by_role("button")).to_have_count(0)  # a viewer reads, changes nothing
    log_out(page)

    log_in(page, console, console.token)
    page.get_by_test_id("nav-schedules").click()
    row = page.get_by_test_id("schedule-row")
    row.get_by_test_id("schedule-pause").click()
    expect(row).to_have_attribute("data-status", "paused")
    assert call(console, "GET", "/v1/schedules")["items"][0]["status"] == "paused"
    page.get_by_test_id("schedule-row").get_by_test_id("schedule-resume").click()
    expect(page.get_by_test_id("schedule-row")).to_have_attribute("data-status", "active")
    page.get_by_test_id("schedule-row").get_by_test_id("schedule-run").click()
    fired = eventually(
        lambda: call(console, "GET", "/v1/schedules")["items"][0]["last_run_id"], "a fired run"
    )
    eventually(lambda: fired in {r["run_id"] for r in runs(console)}, "the fired run listed")
    page.get_by_test_id("schedule-row").get_by_test_id("schedule-delete").click()
    expect(page.get_by_test_id("schedule-row")).to_have_count(0)
    assert call(console, "GET", "/v1/schedules")["items"] == []
