"""The console for named principals, in headless Chromium against a real node: any token logs
in, the header names who is logged in, controls the principal may not use are not shown at
all, a denial carries a reason, and every decision shows who made it (the queue's receipt,
the tape, the approval history), as the journal records it."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from playwright.sync_api import Locator, Page, expect

from actors.messages import StartRun
from tests.browser.console_node import ARTIFACTS, Console

SHELL_MESSAGE = 'hi\n/tool shell.run {"argv": ["echo", "yo"]}'
DECISION_CONTROLS = ("approve", "deny", "confirm-deny", "grant-option")


def api(console: Console, path: str) -> Any:
    """GET ``path`` as the admin: the records as the API presents them."""
    request = urllib.request.Request(
        console.url + path, headers={"Authorization": f"Bearer {console.token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def make_token(console: Console, principal: str, role: str) -> str:
    """A token for ``principal`` with ``role``, made through the API as an admin would."""
    request = urllib.request.Request(
        console.url + "/v1/tokens",
        data=json.dumps({"principal": principal, "roles": [role]}).encode(),
        headers={"Authorization": f"Bearer {console.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        token: str = json.load(reply)["token"]
    return token


def log_in(page: Page, console: Console, token: str) -> None:
    page.goto(console.url + "/")
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("node-status")).to_have_text("connected")


def log_out(page: Page) -> None:
    page.get_by_test_id("logout").click()
    expect(page.get_by_test_id("login-form")).to_be_visible()
    expect(page.get_by_test_id("whoami")).to_be_hidden()


def pending_run(console: Console) -> tuple[str, str]:
    """A run started outside the console that waits for a shell.run approval: (run, session)."""
    ticket = console.runtime.node.ask(StartRun(text=SHELL_MESSAGE, create=True), timeout=10)
    return ticket.run_id, ticket.session_id


def assert_no_decision_controls(where: Locator) -> None:
    for testid in DECISION_CONTROLS:
        expect(where.get_by_test_id(testid)).to_have_count(0)


def test_a_viewer_sees_no_controls_and_an_approver_sees_the_decision(
    console: Console, console_page: Page
) -> None:
    page = console_page
    viewer = make_token(console, "user:vera", "viewer")
    approver = make_token(console, "user:alice", "approver")
    run_id, session_id = pending_run(console)

    # A viewer: read everything, change nothing. The controls are not there at all.
    log_in(page, console, viewer)
    expect(page.get_by_test_id("whoami-principal")).to_have_text("user:vera")
    expect(page.get_by_test_id("whoami-roles")).to_have_text("viewer")
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue).to_have_count(1)
    expect(queue).to_contain_text("shell.run")
    assert_no_decision_controls(queue)
    expect(page.get_by_test_id("approvals-readonly")).to_be_visible()
    expect(page.get_by_test_id("new-session")).to_be_hidden()
    expect(page.get_by_test_id("composer")).to_be_hidden()
    expect(page.get_by_test_id("composer-readonly")).to_be_visible()
    queue.locator(".run-link").click()
    expect(page.get_by_test_id("run-id")).to_have_text(run_id)
    expect(page.get_by_test_id("session-id")).to_have_text(session_id)
    expect(page.get_by_test_id("run-state")).to_have_text("awaiting approval")
    inline = page.get_by_test_id("tape").locator("[data-kind='tool.approval_requested']")
    expect(inline).to_contain_text("shell.run")
    assert_no_decision_controls(inline)
    expect(page.get_by_test_id("cancel-run")).to_be_hidden()
    expect(page.get_by_test_id("posture-form")).to_be_hidden()
    page.get_by_test_id("tab-history").click()
    expect(page.get_by_test_id("history-empty")).to_be_visible()
    page.get_by_test_id("tab-pending").click()
    log_out(page)

    # An approver: decides approvals (queue and tape), still starts and cancels nothing.
    log_in(page, console, approver)
    expect(page.get_by_test_id("whoami-principal")).to_have_text("user:alice")
    expect(page.get_by_test_id("whoami-roles")).to_have_text("approver")
    expect(queue).to_have_count(1)
    expect(queue.get_by_test_id("approve")).to_be_visible()
    expect(queue.get_by_test_id("deny")).to_be_visible()
    expect(page.get_by_test_id("approvals-readonly")).to_be_hidden()
    expect(page.get_by_test_id("new-session")).to_be_hidden()
    expect(page.get_by_test_id("composer")).to_be_hidden()
    queue.locator(".run-link").click()
    expect(inline.get_by_test_id("approve")).to_be_visible()
    expect(page.get_by_test_id("run-state")).to_have_text("awaiting approval")
    expect(page.get_by_test_id("cancel-run")).to_be_hidden()
    log_out(page)

    # The admin sees every control, postures and cancellation included.
    log_in(page, console, console.token)
    expect(page.get_by_test_id("whoami-principal")).to_have_text("admin")
    expect(page.get_by_test_id("new-session")).to_be_visible()
    queue.locator(".run-link").click()
    expect(page.get_by_test_id("run-state")).to_have_text("awaiting approval")
    expect(page.get_by_test_id("cancel-run")).to_be_visible()
    expect(page.get_by_test_id("posture-form")).to_be_visible()
    expect(page.get_by_test_id("composer")).to_be_visible()

    # Logging out forgets the token; nothing of it was ever in a URL or local storage.
    log_out(page)
    assert page.evaluate("sessionStorage.length") == 0
    assert page.evaluate("localStorage.length") == 0


def test_a_denial_asks_for_a_reason_and_every_view_names_who_decided(
    console: Console, console_page: Page
) -> None:
    page = console_page
    approver = make_token(console, "user:alice", "approver")
    run_id, _ = pending_run(console)
    log_in(page, console, approver)
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue).to_have_count(1)
    approval_id = queue.get_attribute("data-approval-id")
    assert approval_id

    # Deny asks for a reason first; an empty one is refused in the page and nothing is sent.
    queue.get_by_test_id("deny").click()
    reason_field = queue.get_by_test_id("deny-reason")
    expect(reason_field).to_be_visible()
    expect(queue.get_by_test_id("approve")).to_be_hidden()
    queue.get_by_test_id("confirm-deny").click()
    expect(queue.get_by_test_id("decision-error")).to_contain_text("Say why")
    record = console.runtime.views.approval(approval_id)
    assert record is not None and record.state == "pending"

    reason = "echo is not needed for this ticket"
    reason_field.fill(reason)
    queue.get_by_test_id("confirm-deny").click()
    expect(queue).to_have_count(0)

    # The page shows the decision with the logged-in principal and the reason.
    receipt = page.get_by_test_id("receipt")
    expect(receipt).to_have_count(1)
    expect(receipt.get_by_test_id("decided-by")).to_have_text("by user:alice")
    expect(receipt.get_by_test_id("decided-reason")).to_contain_text(reason)
    expect(receipt).to_contain_text("denied")

    # The journal's account: the approval record names the principal and the reason.
    record = console.runtime.views.approval(approval_id)
    assert record is not None
    assert record.state == "resolved" and record.decision == "deny"
    assert record.decided_by == "user:alice"
    assert record.decided_reason == reason

    # The approval history: who, when, decision, scope, reason.
    page.get_by_test_id("tab-history").click()
    item = page.get_by_test_id("history-item")
    expect(item).to_have_count(1)
    expect(item).to_have_attribute("data-approval-id", approval_id)
    expect(item).to_have_attribute("data-decision", "deny")
    expect(item).to_contain_text("shell.run")
    expect(item).to_contain_text("denied")
    expect(item.get_by_test_id("history-by")).to_have_text("by user:alice")
    expect(item.get_by_test_id("history-reason")).to_have_text(f"reason: {reason}")
    expect(item.get_by_test_id("history-scope")).to_have_text("scope once")
    expect(item.get_by_test_id("history-covers")).to_contain_text("denied")
    expect(item.get_by_test_id("history-when")).not_to_be_empty()

    # The run's tape says the same, and the denied call went back to the model.
    item.locator(".run-link").click()
    expect(page.get_by_test_id("run-id")).to_have_text(run_id)
    tape = page.get_by_test_id("tape")
    resolved = tape.locator("[data-kind='tool.approval_resolved']")
    expect(resolved.get_by_test_id("resolved-by")).to_have_text("by user:alice")
    expect(resolved).to_contain_text(reason)
    inline = tape.locator("[data-kind='tool.approval_requested']")
    expect(inline.get_by_test_id("decided-by")).to_have_text("by user:alice")
    expect(page.get_by_test_id("run-state")).to_have_text("done")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-history.png"))


def test_an_allow_offers_the_nodes_grant_options_and_the_history_shows_what_it_covers(
    console: Console, console_page: Page
) -> None:
    """The grant options of a pending approval (``options``: scope, match and the sentence of
    what each covers) are offered as they are; a prefix option takes the prefix typed; the
    history shows what the grant covers."""
    page = console_page
    approver = make_token(console, "user:alice", "approver")
    run_id, _ = pending_run(console)
    log_in(page, console, approver)
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue).to_have_count(1)
    approval_id = queue.get_attribute("data-approval-id")
    assert approval_id
    options = api(console, f"/v1/approvals/{approval_id}")["options"]
    assert [o["scope"] for o in options] == ["once", "session", "session", "session", "always"]

    # Each option is offered with the node's own sentence of what it covers.
    offered = queue.get_by_test_id("grant-option")
    expect(offered).to_have_count(len(options))
    for i, option in enumerate(options):
        expect(offered.nth(i)).to_have_attribute("data-scope", option["scope"])
        expect(offered.nth(i)).to_have_attribute("data-match", option["match"])
        expect(offered.nth(i).get_by_test_id("grant-covers")).to_have_text(option["covers"])

    # A prefix grant: the prefix is asked for, and is required.
    prefix_option = queue.locator("[data-testid=grant-option][data-match=prefix]")
    expect(queue.get_by_test_id("grant-prefix")).to_be_hidden()
    prefix_option.click()
    prefix = queue.get_by_test_id("grant-prefix")
    expect(prefix).to_be_visible()
    queue.get_by_test_id("approve").click()
    expect(queue.get_by_test_id("decision-error")).to_contain_text("prefix")
    prefix.fill("echo")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-options.png"))
    queue.get_by_test_id("approve").click()
    expect(queue).to_have_count(0)
    receipt = page.get_by_test_id("receipt")
    expect(receipt.get_by_test_id("decided-by")).to_have_text("by user:alice")

    record = console.runtime.views.approval(approval_id)
    assert record is not None and record.decision == "allow" and record.scope == "session"
    assert record.decided_by == "user:alice"
    presented = api(console, f"/v1/approvals/{approval_id}")
    assert presented["match"] == "prefix" and presented["prefix"] == "echo"
    covers = presented["covers"]
    assert "echo" in covers
    expect(receipt.get_by_test_id("decided-covers")).to_contain_text(covers)

    page.get_by_test_id("tab-history").click()
    item = page.get_by_test_id("history-item")
    expect(item.get_by_test_id("history-covers")).to_have_text(f"covers: {covers}")
    expect(item.get_by_test_id("history-scope")).to_have_text("scope session")
    expect(item.get_by_test_id("history-by")).to_have_text("by user:alice")
    item.locator(".run-link").click()
    expect(page.get_by_test_id("run-id")).to_have_text(run_id)
    expect(page.get_by_test_id("run-state")).to_have_text("done")


def test_an_agent_starts_and_cancels_runs_only_in_its_own_sessions(
    console: Console, console_page: Page
) -> None:
    """``may_own``: an agent may create sessions and start and cancel runs in them, and sees
    neither the composer nor the cancel button in a session someone else created."""
    page = console_page
    agent = make_token(console, "agent:bot", "agent")
    log_in(page, console, agent)
    expect(page.get_by_test_id("whoami-principal")).to_have_text("agent:bot")
    expect(page.get_by_test_id("new-session")).to_be_visible()
    expect(page.get_by_test_id("composer")).to_be_visible()  # a new session of its own

    page.get_by_test_id("message-input").fill("/sleep 20000\nslow")
    page.get_by_test_id("send-button").click()
    expect(page.get_by_test_id("run-state")).to_have_text("in progress")
    own_session = page.get_by_test_id("session-id").inner_text()
    expect(page.get_by_test_id("cancel-run")).to_be_visible()
    expect(page.get_by_test_id("composer")).to_be_visible()
    expect(page.get_by_test_id("posture-form")).to_be_hidden()
    page.get_by_test_id("cancel-run").click()
    expect(page.get_by_test_id("run-state")).to_have_text("cancelled")
    run_id = page.get_by_test_id("run-id").inner_text()
    run = console.runtime.views.run(run_id)
    assert run is not None and run.principal == "agent:bot"

    # A session another principal created: the agent does not even see it listed, and a
    # link to it shows no composer.
    other = console.runtime.node.ask(StartRun(text="hello", create=True), timeout=10)
    page.goto(f"{console.url}/#session={other.session_id}")
    page.reload()
    expect(page.get_by_test_id("whoami-principal")).to_have_text("agent:bot")
    expect(page.get_by_test_id("session-id")).to_have_text(other.session_id)
    expect(page.get_by_test_id("composer")).to_be_hidden()
    sessions = page.get_by_test_id("sessions-list").get_by_test_id("session")
    expect(sessions).to_have_count(1)
    expect(sessions).to_have_attribute("data-session-id", own_session)
