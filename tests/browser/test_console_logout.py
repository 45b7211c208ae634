"""Log out, then log in as someone else in the same tab: nothing of the previous principal
stays on screen (its controls, the decisions it made in this tab, what it had open), in
headless Chromium against a real node."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.console_node import Console, call
from tests.browser.test_console_learning import learned_run
from tests.browser.test_console_principals import log_in, log_out, make_token, pending_run


def log_in_here(page: Page, token: str) -> None:
    """Log in on the form Log out left, without loading the page again (``log_in`` navigates,
    which would start from a fresh document and hide what the last login left behind)."""
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("node-status")).to_have_text("connected")


ADMIN_ONLY = (
    "learning-rollback",
    "learning-accept",
    "learning-reject",
    "learning-reason",
    "approve",
    "deny",
    "grant-option",
    "receipt",
)


def test_a_viewer_after_an_admin_in_the_same_tab_sees_none_of_the_admins_controls(
    console: Console, console_page: Page
) -> None:
    page = console_page
    learned_run(console, "I prefer tables. Never use emoji")
    viewer = make_token(console, "user:vera", "viewer")
    pending_run(console)
    pending_run(console)

    # The admin reviews learning (Roll back buttons) and decides one approval (a receipt).
    log_in(page, console, console.token)
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue).to_have_count(2)
    queue.first.locator("[data-testid=grant-option][data-scope=once]").click()
    queue.first.get_by_test_id("approve").click()
    expect(page.get_by_test_id("receipt")).to_have_count(1)
    expect(queue.get_by_test_id("approve")).to_have_count(1)
    page.get_by_test_id("tab-learning").click()
    page.get_by_test_id("learning-status").select_option("applied")
    expect(page.get_by_test_id("learning-rollback")).to_have_count(2)
    log_out(page)

    # A viewer logs in in the same tab and opens the same views.
    log_in_here(page, viewer)
    expect(page.get_by_test_id("whoami-principal")).to_have_text("user:vera")
    page.get_by_test_id("tab-learning").click()
    page.get_by_test_id("learning-status").select_option("applied")
    expect(page.get_by_test_id("learning-item")).to_have_count(2)
    expect(page.get_by_test_id("learning-readonly")).to_be_visible()
    for testid in ADMIN_ONLY:
        expect(page.get_by_test_id(testid)).to_have_count(0)
    page.get_by_test_id("nav-work").click()
    expect(queue).to_have_count(1)
    for testid in ADMIN_ONLY:
        expect(page.get_by_test_id(testid)).to_have_count(0)


def test_a_token_revoked_while_logged_in_brings_back_the_login_form_and_says_why(
    console: Console, console_page: Page
) -> None:
    page = console_page
    pending_run(console)
    approver = make_token(console, "user:alice", "approver")
    log_in(page, console, approver)
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue.get_by_test_id("approve")).to_be_visible()
    token_id = call(console, "GET", "/v1/whoami", token=approver)["token_id"]
    call(console, "DELETE", f"/v1/tokens/{token_id}")

    expect(page.get_by_test_id("login-form")).to_be_visible()
    expect(page.get_by_test_id("login-error")).to_contain_text("not accepted")
    expect(page.get_by_test_id("approve")).to_have_count(0)
    assert page.evaluate("sessionStorage.getItem('reel.token')") is None
    log_in_here(page, make_token(console, "user:vera", "viewer"))
    expect(queue).to_have_count(1)
    expect(page.get_by_test_id("approve")).to_have_count(0)
