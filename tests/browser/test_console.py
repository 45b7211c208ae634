"""The web console in headless Chromium against a real node: log in with the token, send a
message whose tool call needs an approval, see it in the queue, approve it, and watch the run
finish on the live tape (SSE read with fetch). A screenshot is saved in test-artifacts/."""

from __future__ import annotations

from playwright.sync_api import Page, Request, expect

from actors.messages import ResolveApproval, StartRun
from tests.browser.console_node import ARTIFACTS, Console

SHELL_MESSAGE = 'hi\n/tool shell.run {"argv": ["echo", "yo"]}'


def log_in(page: Page, console: Console) -> None:
    page.goto(console.url + "/")
    page.get_by_test_id("token-input").fill(console.token)
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("node-status")).to_have_text("connected")


def test_approve_a_tool_call_in_the_queue_and_watch_the_run_finish(
    console: Console, console_page: Page
) -> None:
    page = console_page
    requested: list[str] = []

    def record(request: Request) -> None:
        requested.append(request.url)

    page.on("request", record)
    page.goto(console.url + "/")

    # A wrong token is refused and the console stays on the login form.
    page.get_by_test_id("token-input").fill("not-the-token")
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("login-error")).to_contain_text("not accepted")
    expect(page.get_by_test_id("composer")).to_be_hidden()

    page.get_by_test_id("token-input").fill(console.token)
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("composer")).to_be_visible()

    page.get_by_test_id("message-input").fill(SHELL_MESSAGE)
    page.get_by_test_id("send-button").click()

    # The tape streams the proposal and the decision; the queue shows the approval.
    tape = page.get_by_test_id("tape")
    proposed = tape.locator("[data-kind='tool.proposed']")
    expect(proposed).to_contain_text("shell.run")
    expect(proposed.get_by_test_id("tool-args")).to_contain_text('"yo"')
    expect(tape.locator("[data-kind='tool.decided']")).to_contain_text("approval required")
    expect(page.get_by_test_id("run-state")).to_have_text("awaiting approval")
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(queue).to_have_count(1)
    expect(queue).to_contain_text("shell.run")
    expect(queue.get_by_test_id("approval-args")).to_contain_text('["echo","yo"]')
    expect(page.get_by_test_id("approvals-count")).to_have_text("1")

    # Approve once, from the queue; the queue empties without a reload.
    queue.locator("[data-testid=grant-option][data-scope=once]").click()
    queue.get_by_test_id("approve").click()
    expect(queue).to_have_count(0)
    expect(page.get_by_test_id("approvals-count")).to_have_text("0")

    # The run resumes, runs echo, and finishes with the tool's output in the answer.
    resolved = tape.locator("[data-kind='tool.approval_resolved']")
    expect(resolved).to_contain_text("allowed")
    expect(resolved).to_contain_text("scope once")
    expect(
        tape.locator("[data-kind='tool.completed']").get_by_test_id("tool-output")
    ).to_contain_text("yo")
    expect(page.get_by_test_id("run-state")).to_have_text("done")
    terminal = tape.locator("[data-kind='run.completed']")
    expect(terminal).to_contain_text("done")
    expect(terminal.get_by_test_id("answer")).to_contain_text("shell.run ->")
    expect(page.get_by_test_id("stream-status")).to_have_text("ended")
    # The session and its finished run are listed.
    expect(page.get_by_test_id("sessions-list").get_by_test_id("session")).to_have_count(1)
    expect(page.get_by_test_id("runs-list").get_by_test_id("run")).to_have_attribute(
        "data-state", "done"
    )
    run_id = page.get_by_test_id("run-id").inner_text()
    run = console.runtime.views.run(run_id)
    assert run is not None and run.state == "done"

    # The token is kept for this tab only and never travels in a URL.
    assert page.evaluate("sessionStorage.getItem('reel.token')") == console.token
    assert page.evaluate("localStorage.length") == 0
    assert requested, "the page made no requests"
    assert not [url for url in requested if console.token in url]
    assert console.token not in page.url

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console.png"))


def test_the_queue_follows_approvals_made_and_resolved_elsewhere(
    console: Console, console_page: Page
) -> None:
    page = console_page
    log_in(page, console)
    queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
    expect(page.get_by_test_id("approvals-empty")).to_be_visible()

    # A run started outside the console (as gRPC or the CLI would) shows up in the queue.
    node = console.runtime.node
    ticket = node.ask(StartRun(text=SHELL_MESSAGE, create=True), timeout=10)
    expect(queue).to_have_count(1)
    approval_id = queue.get_attribute("data-approval-id")
    assert approval_id

    # Open its run from the queue: the tape offers the same decision inline.
    queue.locator(".run-link").click()
    expect(page.get_by_test_id("run-id")).to_have_text(ticket.run_id)
    inline = page.get_by_test_id("tape").locator("[data-kind='tool.approval_requested']")
    expect(inline.get_by_test_id("approve")).to_be_visible()

    # Denied elsewhere: the queue and the inline controls update without a reload.
    node.ask(ResolveApproval(approval_id=approval_id, decision="deny"), timeout=10)
    expect(queue).to_have_count(0)
    tape = page.get_by_test_id("tape")
    expect(tape.locator("[data-kind='tool.approval_resolved']")).to_contain_text("denied")
    expect(inline.get_by_test_id("approve")).to_have_count(0)
    expect(inline).to_contain_text("denied")
    # The denial goes back to the model as a failed tool result; the run still answers.
    expect(tape.locator("[data-kind='tool.completed']")).to_contain_text("error")
    expect(page.get_by_test_id("run-state")).to_have_text("done")
    expect(page.get_by_test_id("stream-status")).to_have_text("ended")
    # The session the run created is selected and lists the run.
    expect(page.get_by_test_id("session-id")).to_have_text(ticket.session_id)
    expect(page.get_by_test_id("runs-list").get_by_test_id("run")).to_have_count(1)


def test_text_from_the_node_is_shown_as_text_never_as_markup(
    console: Console, console_page: Page
) -> None:
    page = console_page
    log_in(page, console)
    hostile = '<img src=x onerror="window.__pwned=1"><b id="bold">bold</b>'
    page.get_by_test_id("message-input").fill(hostile)
    page.get_by_test_id("send-button").click()
    expect(page.get_by_test_id("run-state")).to_have_text("done")
    tape = page.get_by_test_id("tape")
    expect(tape.locator("[data-kind='run.accepted']")).to_contain_text(hostile)
    expect(tape.locator("[data-kind='run.completed']").get_by_test_id("answer")).to_contain_text(
        hostile
    )
    assert page.locator("img").count() == 0
    assert page.locator("#bold").count() == 0
    assert page.evaluate("window.__pwned === undefined")
