"""The console's Learning tab in headless Chromium against a real node: candidates with their
kind, status, confidence and evidence linked to the runs; review buttons only for principals
that may review, and a review recorded as the one who made it."""

from __future__ import annotations

import time

from playwright.sync_api import Page, expect

from actors.messages import RunTicket, StartRun
from tests.browser.console_node import ARTIFACTS, Console
from tests.browser.test_console_principals import api, log_in, log_out, make_token


def learned_run(console: Console, text: str) -> str:
    """A run of ``user:alice`` whose reflection has been recorded; its id."""
    ticket: RunTicket = console.runtime.node.ask(
        StartRun(text=text, create=True, principal="user:alice"), timeout=10
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        items = api(console, "/v1/learning/candidates")["items"]
        if any(ticket.run_id in [e["run_id"] for e in c["evidence"]] for c in items):
            return ticket.run_id
        time.sleep(0.05)
    raise AssertionError("the run was not reflected on")


def test_the_learning_tab_for_a_viewer_and_an_approver(
    console_page: Page, console: Console
) -> None:
    page = console_page
    run_id = learned_run(console, "I prefer tables. Never use emoji")
    viewer = make_token(console, "user:vic", "viewer")
    approver = make_token(console, "user:ann", "approver")

    # A later run of alice's shows, in its context entry, the preferences it was offered.
    log_in(page, console, make_token(console, "user:alice", "operator"))
    page.get_by_test_id("message-input").fill("show me the numbers")
    page.get_by_test_id("send-button").click()
    context = page.get_by_test_id("tape").locator("[data-kind='run.context_assembled']")
    expect(context.get_by_test_id("context-items")).to_contain_text(
        "learned preference · Prefer tables"
    )
    log_out(page)

    log_in(page, console, viewer)
    page.get_by_test_id("tab-learning").click()
    page.get_by_test_id("learning-status").select_option("applied")
    items = page.get_by_test_id("learning-item")
    expect(items).to_have_count(2)
    expect(page.get_by_test_id("learning-readonly")).to_be_visible()
    expect(page.get_by_test_id("learning-rollback")).to_have_count(0)
    expect(items.first.get_by_test_id("learning-text")).to_have_text("Never use emoji")  # newest
    first = items.filter(has_text="Prefer tables")
    expect(first.get_by_test_id("learning-text")).to_have_text("Prefer tables")
    expect(first.get_by_test_id("learning-confidence")).to_have_text("90.0%")
    expect(first).to_contain_text("applied by reflection")
    # The evidence opens the run's tape.
    first.get_by_test_id("learning-evidence").get_by_role("link").click()
    expect(page.get_by_test_id("run-id")).to_contain_text(run_id[-6:])
    log_out(page)

    log_in(page, console, approver)
    page.get_by_test_id("tab-learning").click()
    page.get_by_test_id("learning-status").select_option("applied")
    expect(page.get_by_test_id("learning-readonly")).to_be_hidden()
    item = page.get_by_test_id("learning-item").filter(has_text="Never use emoji")
    item.get_by_test_id("learning-reason").fill("emoji are fine")
    item.get_by_test_id("learning-rollback").click()
    expect(page.get_by_test_id("learning-item")).to_have_count(1)  # the filter is "applied"
    page.get_by_test_id("learning-status").select_option("rolled_back")
    rolled = page.get_by_test_id("learning-item")
    expect(rolled).to_have_count(1)
    expect(rolled).to_contain_text("rolled back by user:ann")
    expect(rolled).to_contain_text("reason: emoji are fine")
    expect(rolled.get_by_test_id("learning-accept")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "console-learning.png"))
    records = api(console, "/v1/learning/candidates?status=rolled_back")["items"]
    assert [(r["text"], r["decided_by"]) for r in records] == [("Never use emoji", "user:ann")]
