"""The console at 1440 and at 420 pixels wide, in headless Chromium against a real node with
something on every page: a screenshot of each page at each width (test-artifacts/) and the
sizes that make it usable, measured in the page: nothing wider than the window, every field
wide enough to type in and labelled, every button and link inside its pane."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.console_node import ARTIFACTS, Stocked

WIDTHS = {"wide": (1440, 900), "narrow": (420, 860)}
MIN_FIELD_PX = 120
"""The narrowest a text field, a list or a text area may be (the posture form's tool field was
16 px at 1440)."""

MEASURE = """(minField) => {
  const problems = [];
  const width = document.documentElement.clientWidth;
  const shown = (e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden";
  };
  const name = (e) => {
    const id = e.id ? "#" + e.id : "";
    const testid = e.dataset.testid ? `[${e.dataset.testid}]` : "";
    const text = (e.textContent || "").trim().slice(0, 30);
    return `${e.tagName.toLowerCase()}${id}${testid} "${text}"`;
  };
  const wide = document.documentElement.scrollWidth;
  if (wide > width) problems.push(`the page is ${wide} px wide in a ${width} px window`);
  const fields = "input:not([type=checkbox]):not([type=radio]), select, textarea";
  for (const e of document.querySelectorAll(fields)) {
    if (!shown(e)) continue;
    const w = e.getBoundingClientRect().width;
    if (w < minField) problems.push(`${name(e)} is ${Math.round(w)} px wide`);
    if (!(e.labels?.length || e.getAttribute("aria-label")))
      problems.push(`${name(e)} has no label`);
  }
  // (the skip link waits off the window until it has the focus)
  const boxes = ".pane, .page, .topbar, .nav, .incidents, .login-card, .toasts";
  for (const e of document.querySelectorAll(`button, a:not(.skip-link), ${fields}, summary`)) {
    if (!shown(e)) continue;
    const r = e.getBoundingClientRect();
    const box = e.closest(boxes) ?? document.body;
    const b = box.getBoundingClientRect();
    const at = (x) => `[${Math.round(x.left)}, ${Math.round(x.right)}]`;
    if (r.left < b.left - 1 || r.right > b.right + 1)
      problems.push(`${name(e)} ${at(r)} is outside ${box.className} ${at(b)}`);
    if (r.left < -1 || r.right > width + 1) problems.push(`${name(e)} ${at(r)} is off the window`);
  }
  return problems;
}"""


def measured(page: Page) -> list[str]:
    problems: list[str] = page.evaluate(MEASURE, MIN_FIELD_PX)
    return problems


@pytest.fixture(params=list(WIDTHS))
def sized(request: pytest.FixtureRequest, chromium_browser: Browser) -> Iterator[tuple[str, Page]]:
    width, height = WIDTHS[request.param]
    context = chromium_browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(15_000)
    try:
        yield request.param, context.new_page()
    finally:
        context.close()


def test_every_page_is_usable_wide_and_narrow(stocked: Stocked, sized: tuple[str, Page]) -> None:
    size, page = sized
    console = stocked.console
    ARTIFACTS.mkdir(exist_ok=True)
    problems: dict[str, list[str]] = {}

    def shot(name: str, ready: Callable[[], None]) -> None:
        ready()
        page.screenshot(path=str(ARTIFACTS / f"console-{name}-{size}.png"), full_page=True)
        if found := measured(page):
            problems[name] = found

    page.goto(console.url + "/")
    shot("login", lambda: expect(page.get_by_test_id("login-form")).to_be_visible())
    page.get_by_test_id("token-input").fill(console.token)
    page.get_by_test_id("login-button").click()
    expect(page.get_by_test_id("node-status")).to_have_text("connected")

    def work() -> None:
        page.goto(f"{console.url}/#run={stocked.runs['waiting']}")
        expect(page.get_by_test_id("session-id")).to_have_text(stocked.sessions["ops"])
        expect(page.get_by_test_id("posture-form")).to_be_visible()
        expect(page.get_by_test_id("tape").get_by_test_id("approve")).to_be_visible()

    shot("sessions", work)

    def deny_form() -> None:
        queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
        queue.get_by_test_id("deny").click()
        expect(queue.get_by_test_id("deny-reason")).to_be_visible()

    shot("deny", deny_form)

    def session() -> None:
        page.goto(f"{console.url}/#session={stocked.sessions['billing']}")
        expect(page.get_by_test_id("checkpoint").first).to_be_visible()
        page.locator("details.tools summary").click()
        expect(page.get_by_test_id("tool-posture").first).to_be_visible()

    shot("session", session)

    pages: dict[str, tuple[str, Callable[[], object]]] = {
        "runs": (
            "view=runs&tab=failed",
            lambda: expect(page.get_by_test_id("run-row")).to_have_count(1),
        ),
        "search": (
            "view=search&q=billing",
            lambda: expect(page.get_by_test_id("session-row")).to_have_count(1),
        ),
        "tasks": (
            "view=tasks",
            lambda: expect(page.get_by_test_id("task-row").first).to_be_visible(),
        ),
        "incidents": (
            "view=incidents",
            lambda: expect(page.get_by_test_id("incident-row").first).to_be_visible(),
        ),
        "memory": ("view=memory", lambda: page.get_by_text("Remember something").click()),
        "learning": (
            "view=learning",
            lambda: page.get_by_test_id("learning-status").select_option("applied"),
        ),
        "channels": ("view=channels", lambda: page.get_by_test_id("mint-pair-code").click()),
        "tokens": ("view=tokens", lambda: page.get_by_text("Make a token").click()),
        "journal": ("view=journal", lambda: page.get_by_test_id("verify-journal").click()),
    }
    settled = {
        "memory": lambda: expect(page.get_by_test_id("memory-write")).to_be_visible(),
        "learning": lambda: expect(page.get_by_test_id("learning-rollback").first).to_be_visible(),
        "channels": lambda: expect(page.get_by_test_id("pair-code")).to_be_visible(),
        "tokens": lambda: expect(page.get_by_test_id("token-form")).to_be_visible(),
        "journal": lambda: expect(page.get_by_test_id("verify-result")).to_be_visible(),
    }
    for name, (where, act) in pages.items():

        def ready(where: str = where, act: Callable[[], object] = act, name: str = name) -> None:
            page.goto(f"{console.url}/#{where}")
            expect(page.get_by_test_id(f"page-{name}")).to_be_visible()
            act()
            settled.get(name, lambda: None)()

        shot(name, ready)

    assert not problems, "\n".join(f"{k}: {p}" for k, found in problems.items() for p in found)


def test_the_posture_form_fits_its_pane(stocked: Stocked, sized: tuple[str, Page]) -> None:
    """The tool field is wide enough to read a tool's name and Set stays in the pane."""
    _, page = sized
    console = stocked.console
    page.goto(console.url + "/")
    page.get_by_test_id("token-input").fill(console.token)
    page.get_by_test_id("login-button").click()
    page.goto(f"{console.url}/#session={stocked.sessions['billing']}")
    form = page.get_by_test_id("posture-form")
    expect(form).to_be_visible()
    pane = page.locator(".session-pane").bounding_box()
    tool = page.get_by_test_id("posture-tool").bounding_box()
    button = page.get_by_test_id("posture-set").bounding_box()
    assert pane and tool and button
    assert tool["width"] >= 200, tool
    assert pane["x"] <= button["x"] and button["x"] + button["width"] <= pane["x"] + pane["width"]
