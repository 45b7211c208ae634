"""The console's pages in headless Chromium against a real node with something on each
(console_node.stocked_console): runs by state with who and why, search, a session's runs,
checkpoints and postures, tasks, incidents, memory, channels, tokens and the journal, each
what the HTTP API answers; what a viewer and an agent see; the keyboard alone gets around."""

from __future__ import annotations

import urllib.error

import pytest
from playwright.sync_api import Page, expect

from tests.browser.console_node import Stocked, call
from tests.browser.test_console_principals import log_in


def go(page: Page, stocked: Stocked, where: str) -> None:
    """Open the console at ``#where`` (a page and its filters) in the logged-in tab."""
    page.goto(f"{stocked.console.url}/#{where}")


def rows(page: Page, testid: str = "run-row") -> list[str]:
    return [r.get_attribute("data-run-id") or "" for r in page.get_by_test_id(testid).all()]


def test_runs_by_state_with_who_and_why(stocked: Stocked, console_page: Page) -> None:
    page = console_page
    log_in(page, stocked.console, stocked.console.token)
    page.get_by_test_id("nav-runs").click()
    table = page.get_by_test_id("runs-table")
    live = table.locator(f"[data-run-id='{stocked.runs['live']}']")
    expect(live).to_have_attribute("data-state", "in_progress")
    expect(live.get_by_test_id("run-principal")).to_have_text("agent:app")
    expect(live).to_contain_text("slow one")  # the session by its name, not its id
    expect(table.get_by_test_id("run-row")).to_have_count(1)

    page.get_by_test_id("runs-tab-awaiting_approval").click()
    waiting = table.get_by_test_id("run-row")
    expect(waiting).to_have_count(1)
    expect(waiting).to_have_attribute("data-run-id", stocked.runs["waiting"])
    expect(waiting.get_by_test_id("run-principal")).to_have_text("user:op")

    page.get_by_test_id("runs-tab-failed").click()
    failed = table.get_by_test_id("run-row")
    expect(failed).to_have_count(1)
    expect(failed.get_by_test_id("run-failure")).to_contain_text("database on fire")
    expect(failed).to_contain_text("Billing incident")

    page.get_by_test_id("runs-tab-done").click()
    expect(table.locator(f"[data-run-id='{stocked.runs['zebra']}']")).to_contain_text("zebra")
    done = call(stocked.console, "GET", "/v1/runs?state=done&order=newest&limit=50")["items"]
    expect(table.get_by_test_id("run-row")).to_have_count(len(done))
    assert rows(page) == [r["run_id"] for r in done]  # newest first, as the API lists them

    # Filters: who the run acts for, text; a bad value is the API's 400, naming the field.
    page.get_by_test_id("runs-tab-all").click()
    page.get_by_test_id("runs-principal").fill("user:op")
    page.get_by_test_id("runs-apply").click()
    expect(table.get_by_test_id("run-row")).to_have_count(1)
    expect(table.get_by_test_id("run-row")).to_have_attribute(
        "data-run-id", stocked.runs["waiting"]
    )
    page.get_by_test_id("runs-principal").fill("")
    page.get_by_test_id("runs-q").fill("ZEBRA")
    page.get_by_test_id("runs-apply").click()
    expect(table.get_by_test_id("run-row")).to_have_count(1)
    expect(table.get_by_test_id("run-row")).to_have_attribute("data-run-id", stocked.runs["zebra"])
    page.get_by_test_id("runs-q").fill("")
    page.get_by_test_id("runs-principal").fill("not a principal")
    page.get_by_test_id("runs-apply").click()
    expect(page.get_by_test_id("runs-problem")).to_contain_text("query.principal")

    # A run opens its tape on the sessions page.
    page.get_by_test_id("runs-clear").click()
    page.get_by_test_id("runs-tab-failed").click()
    # Wait for the tab's own row before clicking: the previous list is still drawn meanwhile.
    failed_row = table.locator(f"[data-run-id='{stocked.runs['failed']}']")
    expect(table.get_by_test_id("run-row")).to_have_count(1)
    failed_row.locator(".run-link").click()
    expect(page.get_by_test_id("run-id")).to_have_text(stocked.runs["failed"])
    expect(page.get_by_test_id("session-id")).to_have_text(stocked.sessions["billing"])
    expect(page.get_by_test_id("run-state")).to_have_text("failed")


def test_search_finds_sessions_and_runs(stocked: Stocked, console_page: Page) -> None:
    page = console_page
    log_in(page, stocked.console, stocked.console.token)
    page.get_by_test_id("search-input").fill("ops:bill")  # a session key
    page.get_by_test_id("search-input").press("Enter")
    found = page.get_by_test_id("found-sessions").get_by_test_id("session-row")
    expect(found).to_have_count(1)
    expect(found).to_have_attribute("data-session-id", stocked.sessions["billing"])
    expect(found).to_contain_text("Billing incident")

    page.get_by_test_id("search-input").fill("user:op")  # an owner, and who a run acts for
    page.get_by_test_id("search-button").click()
    expect(found).to_have_count(1)
    expect(found).to_have_attribute("data-session-id", stocked.sessions["ops"])
    runs = page.get_by_test_id("found-runs").get_by_test_id("run-row")
    expect(runs).to_have_count(1)
    expect(runs).to_have_attribute("data-run-id", stocked.runs["waiting"])

    page.get_by_test_id("search-input").fill("zebra")  # an answer
    page.get_by_test_id("search-button").click()
    expect(runs).to_have_count(1)
    expect(runs).to_have_attribute("data-run-id", stocked.runs["zebra"])
    expect(found).to_have_count(0)

    page.get_by_test_id("search-input").fill("billing")
    page.get_by_test_id("search-button").click()
    found.locator(".session-link").click()
    expect(page.get_by_test_id("session-id")).to_have_text(stocked.sessions["billing"])
    expect(page.get_by_test_id("page-work")).to_be_visible()


def test_a_session_shows_its_owner_checkpoints_and_postures(
    stocked: Stocked, console_page: Page
) -> None:
    page = console_page
    console = stocked.console
    billing = stocked.sessions["billing"]
    log_in(page, console, console.token)
    go(page, stocked, f"session={billing}")
    expect(page.get_by_test_id("session-name")).to_have_text("Billing incident")
    expect(page.get_by_test_id("session-owner")).to_have_text("admin")
    expect(page.get_by_test_id("session-facts")).to_contain_text("ops:billing")

    # Its compaction checkpoints, the one in force marked, as the API lists them.
    made = call(console, "GET", f"/v1/sessions/{billing}/checkpoints")
    checkpoints = page.get_by_test_id("checkpoint")
    expect(checkpoints).to_have_count(len(made["items"]))
    in_force = page.locator(f"[data-checkpoint-id='{made['in_force']}']")
    expect(in_force).to_contain_text("in force")
    expect(page.get_by_test_id("checkpoints-count")).to_have_text(str(len(made["items"])))

    # Its postures: the override with who set it; every tool under them.
    override = page.get_by_test_id("posture-override")
    expect(override).to_have_count(1)
    expect(override).to_have_attribute("data-tool", "echo")
    expect(override).to_contain_text("disabled")
    expect(override.get_by_test_id("posture-set-by")).to_have_text("set by admin")
    tools = call(console, "GET", f"/v1/sessions/{billing}/postures")["items"]
    expect(page.get_by_test_id("tool-posture")).to_have_count(len(tools))

    # The form picks a tool the node has (a list, not a 16 px text field) and sets it.
    tool = page.get_by_test_id("posture-tool")
    assert tool.evaluate("e => e.tagName") == "SELECT"
    assert sorted(tool.locator("option").all_inner_texts()) == sorted(t["tool"] for t in tools)
    tool.select_option("shell.run")
    page.get_by_test_id("posture-value").select_option("ask_each_time")
    page.get_by_test_id("posture-set").click()
    expect(page.locator("[data-testid=posture-override][data-tool='shell.run']")).to_contain_text(
        "set by admin"
    )
    after = {
        t["tool"]: t for t in call(console, "GET", f"/v1/sessions/{billing}/postures")["items"]
    }
    assert (after["shell.run"]["override"], after["shell.run"]["set_by"]) == (
        "ask_each_time",
        "admin",
    )


def test_tasks_incidents_memory_channels_and_the_journal(
    stocked: Stocked, console_page: Page
) -> None:
    page = console_page
    console = stocked.console
    log_in(page, console, console.token)

    page.get_by_test_id("nav-tasks").click()
    tasks = call(console, "GET", "/v1/tasks?order=newest")["items"]
    assert tasks
    expect(page.get_by_test_id("task-row").first).to_have_attribute(
        "data-task-id", tasks[0]["task_id"]
    )
    page.get_by_test_id("tasks-state").select_option("failed")
    expect(page.get_by_test_id("task-row")).to_have_count(0)

    page.get_by_test_id("nav-incidents").click()
    stalled = page.get_by_test_id("incident-row").filter(has_text=stocked.runs["stalled"][-6:])
    expect(stalled.first).to_have_attribute("data-state", "resolved")
    page.get_by_test_id("incidents-state").select_option("open")
    expect(
        page.get_by_test_id("incident-row").filter(has_text=stocked.runs["stalled"][-6:])
    ).to_have_count(0)

    page.get_by_test_id("nav-memory").click()
    items = page.get_by_test_id("memory-item")
    expect(items.filter(has_text="PostgreSQL 16")).to_have_count(1)
    page.get_by_text("Remember something").click()
    page.get_by_test_id("memory-text-input").fill("Deploys happen on Tuesdays")
    page.get_by_test_id("memory-scope").select_option("global")
    page.get_by_test_id("memory-remember").click()
    written = items.filter(has_text="Deploys happen on Tuesdays")
    expect(written).to_contain_text("admin")
    item_id = written.get_attribute("data-item-id")
    page.get_by_test_id("memory-q").fill("tuesdays deploys")
    page.get_by_test_id("memory-q").press("Enter")
    expect(items.first).to_have_attribute("data-item-id", item_id or "")
    expect(items.first).to_contain_text("score")
    items.first.get_by_test_id("memory-delete-reason").fill("moved to Wednesdays")
    items.first.get_by_test_id("memory-delete").click()
    expect(page.locator(f"[data-item-id='{item_id}']")).to_have_count(0)
    with pytest.raises(urllib.error.HTTPError) as gone:
        call(console, "GET", f"/v1/memory/{item_id}")
    assert gone.value.code == 404

    page.get_by_test_id("nav-channels").click()
    hook = page.get_by_test_id("channel")
    expect(hook).to_have_attribute("data-channel", "hook")
    expect(hook).to_contain_text("pairing")
    hook.get_by_test_id("mint-pair-code").click()
    expect(hook.get_by_test_id("pair-code")).to_contain_text("single use")

    page.get_by_test_id("nav-journal").click()
    head = call(console, "GET", "/v1/journal/head")["position"]
    assert int(page.get_by_test_id("head-position").inner_text()) >= head
    expect(page.get_by_test_id("journal-signing")).to_contain_text("signed as")
    page.get_by_test_id("verify-journal").click()
    result = page.get_by_test_id("verify-result")
    expect(result).to_have_attribute("data-ok", "true")
    expect(result).to_contain_text("The journal verifies.")


def test_tokens_are_made_shown_once_and_revoked(stocked: Stocked, console_page: Page) -> None:
    page = console_page
    console = stocked.console
    log_in(page, console, console.token)
    page.get_by_test_id("nav-tokens").click()
    page.get_by_text("Make a token").click()
    page.get_by_test_id("token-principal-input").fill("user:newbie")
    page.locator("input[name=role][value=viewer]").check()
    page.get_by_test_id("token-note").fill("for the console test")
    page.get_by_test_id("token-create").click()
    shown = page.get_by_test_id("token-made-value")
    expect(shown).to_contain_text("reel_")
    token = shown.inner_text()
    assert call(console, "GET", "/v1/whoami", token=token)["principal"] == "user:newbie"
    card = page.get_by_test_id("token").filter(has_text="user:newbie")
    expect(card).to_have_attribute("data-state", "active")
    expect(card).to_contain_text("for the console test")
    assert token not in card.inner_text()  # the list never holds the token itself

    # Shown once: gone when the page is left.
    page.get_by_test_id("nav-runs").click()
    page.get_by_test_id("nav-tokens").click()
    expect(page.get_by_test_id("token-made")).to_be_hidden()
    expect(shown).to_have_text("")

    card.get_by_test_id("revoke-token").click()
    card.get_by_test_id("confirm-revoke").click()
    expect(card).to_have_attribute("data-state", "revoked")
    with pytest.raises(urllib.error.HTTPError) as refused:
        call(console, "GET", "/v1/whoami", token=token)
    assert refused.value.code == 401


def test_a_viewer_reads_the_pages_and_finds_no_control(
    stocked: Stocked, console_page: Page
) -> None:
    page = console_page
    log_in(page, stocked.console, stocked.tokens["user:vera"])
    for testid in ("nav-runs", "nav-tasks", "nav-incidents", "nav-memory", "nav-journal"):
        expect(page.get_by_test_id(testid)).to_be_visible()
    expect(page.get_by_test_id("nav-tokens")).to_be_hidden()
    go(page, stocked, "view=tokens")  # a page it may not see is the sessions page
    expect(page.get_by_test_id("page-work")).to_be_visible()
    expect(page.get_by_test_id("page-tokens")).to_be_hidden()

    go(page, stocked, f"session={stocked.sessions['billing']}")
    expect(page.get_by_test_id("checkpoint").first).to_be_visible()
    expect(page.get_by_test_id("posture-override").first).to_be_visible()
    for testid in ("posture-form", "compact-session", "composer"):
        expect(page.get_by_test_id(testid)).to_be_hidden()
    expect(page.get_by_test_id("restore-checkpoint")).to_have_count(0)

    page.get_by_test_id("nav-memory").click()
    expect(page.get_by_test_id("memory-item").first).to_be_visible()
    expect(page.get_by_test_id("memory-write")).to_be_hidden()
    expect(page.get_by_test_id("memory-delete")).to_have_count(0)
    page.get_by_test_id("nav-tasks").click()
    expect(page.get_by_test_id("task-row").first).to_be_visible()
    expect(page.get_by_test_id("task-cancel")).to_have_count(0)
    page.get_by_test_id("nav-channels").click()
    expect(page.get_by_test_id("channel")).to_be_visible()
    expect(page.get_by_test_id("mint-pair-code")).to_have_count(0)


def test_an_agent_finds_only_its_own(stocked: Stocked, console_page: Page) -> None:
    page = console_page
    log_in(page, stocked.console, stocked.tokens["agent:app"])
    page.get_by_test_id("nav-runs").click()
    page.get_by_test_id("runs-tab-all").click()
    expect(page.get_by_test_id("run-row")).to_have_count(1)
    expect(page.get_by_test_id("run-row")).to_have_attribute("data-run-id", stocked.runs["live"])
    page.get_by_test_id("search-input").fill("billing")
    page.get_by_test_id("search-input").press("Enter")
    expect(page.get_by_test_id("search-text")).to_have_text("billing")
    expect(page.get_by_test_id("found-sessions").get_by_test_id("session-row")).to_have_count(0)
    expect(page.get_by_test_id("found-runs").get_by_test_id("run-row")).to_have_count(0)
    for testid in ("nav-tokens", "nav-journal", "nav-tasks", "nav-incidents"):
        expect(page.get_by_test_id(testid)).to_be_hidden()


def test_the_keyboard_alone_logs_in_and_gets_around(stocked: Stocked, console_page: Page) -> None:
    page = console_page
    page.goto(stocked.console.url + "/")
    expect(page.get_by_test_id("token-input")).to_be_focused()  # the form has the focus
    page.keyboard.type(stocked.console.token)
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("node-status")).to_have_text("connected")

    def tab_to(testid: str) -> None:
        for _ in range(60):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement?.dataset?.testid") == testid:
                return
        raise AssertionError(f"Tab never reached {testid}")

    tab_to("nav-runs")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("page-runs")).to_be_visible()
    expect(page.locator("#runs-title")).to_be_focused()  # the page's heading, for a reader
    tab_to("runs-tab-failed")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("run-row")).to_have_attribute("data-state", "failed")

    tab_to("nav-work")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("page-work")).to_be_visible()
    billing = page.locator(
        f"[data-testid=session][data-session-id='{stocked.sessions['billing']}']"
    )
    billing.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("session-id")).to_have_text(stocked.sessions["billing"])
    tab_to("run")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("run-id")).not_to_be_empty()
