// The approvals pane of the sessions page: the pending queue with its decision controls (the
// tape shows the same controls inline), the decisions made in this tab, and the history.

import { ApiError, api, enc, page, q } from "./api.js";
import {
  $,
  badge,
  clock,
  h,
  pretty,
  reconcile,
  reportError,
  runLink,
  sessionLink,
  toast,
  until,
  when,
} from "./dom.js";
import { can, ownerOf, sessionName, state } from "./state.js";

const SCOPES = ["once", "session", "always"];
const HISTORY_PAGE = 200;
const MAX_HISTORY = 200;
const MAX_RECEIPTS = 5;

const MATCH_NAME = { any: "", exact: "exact arguments", prefix: "by prefix" };
let controlsMade = 0;

/**
 * The decision controls of one pending approval (the queue and the tape use the same): the
 * grant options the node offers (the record's `options`: scope, match and the sentence saying
 * what each `covers`, with a text field for the prefix of a `match: prefix` option), Allow,
 * and Deny, which asks for a reason first. Callers show them only to principals who may decide
 * (`can("approval.resolve")`). `record` is the approval record when the caller has it;
 * otherwise it is read (the tape's event does not carry the options).
 */
export function approvalControls(approvalId, record, fallbackScopes) {
  const controls = h("div", {
    class: "approval-controls",
    testid: "approval-controls",
    data: { approvalId },
  });
  if (state.resolved.has(approvalId)) {
    markResolved(controls, null);
  } else if (record) {
    fillControls(controls, approvalId, record, fallbackScopes);
  } else {
    controls.append(h("span", { class: "muted small", text: "reading the options…" }));
    api
      .get(`/v1/approvals/${enc(approvalId)}`)
      .then((found) => {
        if (controls.classList.contains("done")) return;
        if (found?.state && found.state !== "pending") markResolved(controls, found);
        else fillControls(controls, approvalId, found, fallbackScopes);
      })
      .catch(() => {
        if (!controls.classList.contains("done"))
          fillControls(controls, approvalId, null, fallbackScopes);
      });
  }
  return controls;
}

/** The choices an allow offers: the node's `options` when the record has them, else scopes. */
function grantChoices(record, fallbackScopes) {
  if (Array.isArray(record?.options) && record.options.length)
    return { choices: record.options, bound: true };
  const scopes = (fallbackScopes?.length ? fallbackScopes : SCOPES).filter((s) =>
    SCOPES.includes(s),
  );
  return { choices: scopes.map((scope) => ({ scope, match: "any", covers: "" })), bound: false };
}

function optionName(choice) {
  const match = MATCH_NAME[choice.match] ?? choice.match;
  return match ? `${choice.scope}, ${match}` : choice.scope;
}

function prefixHint(tool) {
  if (tool === "shell.run") return "the argv prefix, e.g. git status";
  if (tool?.startsWith("fs.")) return "a path prefix, e.g. docs/";
  if (tool === "http.fetch") return "method and URL prefix, e.g. GET https://example.com/api/";
  return "the prefix the grant covers";
}

function fillControls(controls, approvalId, record, fallbackScopes) {
  const { choices, bound } = grantChoices(record, fallbackScopes);
  const name = `grant-${approvalId}-${++controlsMade}`;
  const prefix = h("input", {
    type: "text",
    class: "prefix-input",
    testid: "grant-prefix",
    placeholder: prefixHint(record?.tool),
    spellcheck: "false",
    autocomplete: "off",
    "aria-label": "The prefix this grant covers",
    hidden: true,
  });
  const options = h(
    "fieldset",
    { class: "grant-options", testid: "grant-options" },
    h("legend", { class: "sr-only", text: "What allowing grants" }),
    choices.flatMap((choice, i) => [
      h(
        "label",
        {
          class: "grant-option",
          testid: "grant-option",
          data: { scope: choice.scope, match: choice.match },
        },
        h("input", { type: "radio", name, value: String(i), checked: i === 0 }),
        h("span", { class: "grant-name", text: optionName(choice) }),
        choice.covers
          ? h("span", { class: "grant-covers", testid: "grant-covers", text: choice.covers })
          : null,
      ),
      choice.match === "prefix" ? prefix : null, // the field sits under its option
    ]),
  );
  const chosen = () => choices[Number(options.querySelector("input:checked")?.value ?? 0)];
  options.addEventListener("change", () => {
    prefix.hidden = chosen()?.match !== "prefix";
    if (!prefix.hidden) prefix.focus();
  });

  const problem = h("p", { class: "error small", role: "alert", testid: "decision-error" });
  prefix.addEventListener("input", () => (problem.textContent = ""));
  const allow = h("button", { type: "button", class: "allow", testid: "approve", text: "Allow" });
  const deny = h("button", { type: "button", class: "deny", testid: "deny", text: "Deny…" });
  const buttons = h("div", { class: "buttons" }, allow, deny);
  const reason = h("textarea", {
    class: "deny-reason",
    testid: "deny-reason",
    rows: 2,
    placeholder: "Why deny? The reason is recorded with the decision.",
    "aria-label": "Reason for the denial",
  });
  const confirm = h("button", {
    type: "button",
    class: "deny",
    testid: "confirm-deny",
    text: "Deny",
  });
  const back = h("button", { type: "button", class: "ghost", testid: "cancel-deny", text: "Back" });
  const denyForm = h(
    "div",
    { class: "deny-form", testid: "deny-form", hidden: true },
    reason,
    h("div", { class: "buttons" }, back, confirm),
  );

  allow.addEventListener("click", () => {
    const choice = chosen() ?? choices[0];
    const body = { decision: "allow", scope: choice.scope };
    if (bound) {
      body.match = choice.match;
      if (choice.match === "prefix") {
        const text = prefix.value.trim();
        if (!text) {
          problem.textContent = "Type the prefix this grant covers.";
          prefix.focus();
          return;
        }
        body.prefix = text;
      }
    }
    resolveApproval(approvalId, record?.tool, body, [allow, deny], problem);
  });
  deny.addEventListener("click", () => {
    problem.textContent = "";
    options.hidden = buttons.hidden = true;
    denyForm.hidden = false;
    reason.focus();
  });
  back.addEventListener("click", () => {
    problem.textContent = "";
    options.hidden = buttons.hidden = false;
    denyForm.hidden = true;
  });
  confirm.addEventListener("click", () => {
    const text = reason.value.trim();
    if (!text) {
      problem.textContent = "Say why: the reason is recorded with the denial.";
      reason.focus();
      return;
    }
    const body = { decision: "deny", scope: "once", reason: text };
    resolveApproval(approvalId, record?.tool, body, [confirm, back], problem);
  });
  controls.replaceChildren(options, buttons, denyForm, problem);
}

async function resolveApproval(approvalId, tool, body, buttons, problem) {
  buttons.forEach((b) => (b.disabled = true));
  problem.textContent = "";
  try {
    const record = await api.post(`/v1/approvals/${enc(approvalId)}`, body);
    // What the node recorded (decided_by is the logged-in principal); the request fills gaps.
    const decided = {
      tool,
      ...body,
      decided_by: state.me?.principal,
      decided_reason: body.reason ?? "",
      ...(record ?? {}),
    };
    state.resolved.add(approvalId);
    const verb = decided.decision === "allow" ? "Allowed" : "Denied";
    toast(`${verb} (${decided.scope}) as ${decided.decided_by}.`);
    addReceipt(decided);
    dropFromQueue(approvalId);
    markEverywhere(approvalId, decided);
    if (state.approvalsTab === "history") refreshHistory().catch(() => {});
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 409) {
      state.resolved.add(approvalId);
      dropFromQueue(approvalId);
      toast(`Already resolved: ${exc.message}`, "error");
      api
        .get(`/v1/approvals/${enc(approvalId)}`)
        .then((found) => markEverywhere(approvalId, found))
        .catch(() => markEverywhere(approvalId, null));
    } else {
      buttons.forEach((b) => (b.disabled = false));
      if (!(exc instanceof ApiError && exc.status === 401))
        problem.textContent = exc instanceof ApiError ? exc.message : String(exc);
    }
  }
}

function markEverywhere(approvalId, info) {
  document.querySelectorAll(".approval-controls").forEach((c) => {
    if (c.dataset.approvalId === approvalId) markResolved(c, info);
  });
}

/** Replace the controls by the decision: what, which scope, by whom, what it grants, why. */
export function markResolved(controls, info) {
  if (controls.dataset.decided === "1") return; // never replace a full account by less
  controls.replaceChildren(
    info ? decisionSummary(info) : h("span", { class: "muted resolved", text: "resolved" }),
  );
  controls.classList.add("done");
  if (info) controls.dataset.decided = "1";
}

/** A decision as text: `info` is an approval record, a tool.approval_resolved event or both. */
function decisionSummary(info) {
  const allowed = info.decision === "allow";
  const reason = info.decided_reason || info.reason || "";
  return h(
    "div",
    { class: "decision-summary", testid: "decision-summary" },
    h(
      "div",
      { class: "head" },
      badge(allowed ? "allowed" : "denied", "decision"),
      h("span", { class: "muted", text: `scope ${info.scope ?? "once"}` }),
      info.decided_by
        ? h("span", { class: "decided-by", testid: "decided-by", text: `by ${info.decided_by}` })
        : null,
    ),
    info.covers
      ? h("div", { class: "muted small", testid: "decided-covers", text: `covers: ${info.covers}` })
      : null,
    reason
      ? h("div", { class: "detail", testid: "decided-reason", text: `reason: ${reason}` })
      : null,
  );
}

/** The decisions made in this tab, newest first (the queue item itself goes away). */
function addReceipt(decided) {
  const list = $("receipts");
  const li = h(
    "li",
    { class: "receipt", testid: "receipt", data: { approvalId: decided.approval_id ?? "" } },
    h(
      "div",
      { class: "item-meta" },
      h("span", { class: "tool-name", text: decided.tool ?? "" }),
      h("span", { text: clock(decided.resolved_at_ms ?? Date.now()) }),
    ),
    decisionSummary(decided),
  );
  list.prepend(li);
  while (list.children.length > MAX_RECEIPTS) list.lastElementChild.remove();
  $("receipts-head").hidden = false;
}

export function dropFromQueue(approvalId) {
  const li = state.approvals.get(approvalId);
  if (li) {
    li.remove();
    state.approvals.delete(approvalId);
  }
  renderApprovalsCount();
}

export async function refreshApprovals() {
  const { items } = page(await api.get(`/v1/approvals${q({ state: "pending", limit: 200 })}`));
  const list = $("approvals-list");
  const live = new Set();
  for (const a of items) {
    if (a.state && a.state !== "pending") continue;
    if (state.resolved.has(a.approval_id)) continue;
    live.add(a.approval_id);
    let li = state.approvals.get(a.approval_id);
    if (!li) {
      // Keep existing cards: re-rendering would reset an option or a reason being typed.
      li = approvalItem(a);
      state.approvals.set(a.approval_id, li);
      list.append(li);
    }
    const expiry = li.querySelector(".expiry");
    if (expiry) expiry.textContent = until(a.expires_at_ms);
  }
  for (const [id, li] of state.approvals) {
    if (!live.has(id)) {
      li.remove();
      state.approvals.delete(id);
    }
  }
  renderApprovalsCount();
}

function renderApprovalsCount() {
  const n = state.approvals.size;
  $("approvals-count").textContent = String(n);
  $("approvals-count").classList.toggle("hot", n > 0);
  $("approvals-empty").hidden = n > 0;
  $("nav-pending").textContent = n ? String(n) : "";
  $("nav-pending").hidden = n === 0;
  document.title = n ? `(${n}) reel console` : "reel console";
}

function approvalItem(a) {
  const decides = can("approval.resolve", ownerOf(a.session_id));
  return h(
    "li",
    { class: "approval", testid: "approval", data: { approvalId: a.approval_id, runId: a.run_id } },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: a.subject === "pairing" ? "device pairing" : a.tool }),
      badge(a.risk ?? "unknown", "risk"),
      h("span", { class: "muted expiry", text: until(a.expires_at_ms) }),
    ),
    a.reason ? h("div", { class: "detail", text: a.reason }) : null,
    h("pre", { class: "args", testid: "approval-args", text: pretty(a.arguments) }),
    h(
      "div",
      { class: "item-meta" },
      a.run_id ? runLink(a.run_id) : null, // a pairing request has no run or session
      a.session_id
        ? sessionLink(a.session_id, sessionName(state.sessions.get(a.session_id), a.session_id))
        : null,
      h("span", { text: a.principal }),
      h("span", { text: clock(a.requested_at_ms) }),
    ),
    decides ? approvalControls(a.approval_id, a, null) : null,
  );
}

// --- approval history -----------------------------------------------------------------------

export function showApprovalsTab(view) {
  state.approvalsTab = view;
  for (const [name, tab] of [
    ["pending", $("tab-pending")],
    ["history", $("tab-history")],
  ]) {
    tab.setAttribute("aria-selected", String(view === name));
    tab.tabIndex = view === name ? 0 : -1;
    tab.classList.toggle("active", view === name);
  }
  $("pending-view").hidden = view !== "pending";
  $("history-view").hidden = view !== "history";
  if (view === "history") refreshHistory().catch(reportError);
}

/**
 * Resolved approvals, most recently decided first. The API pages approvals by id (request
 * order), and an old request may be decided late, so every page is read; the newest
 * MAX_HISTORY decisions are shown. Polled only while the history tab is open.
 */
export async function refreshHistory() {
  const all = [];
  let after;
  for (;;) {
    const { items, next } = page(
      await api.get(`/v1/approvals${q({ state: "resolved", after, limit: HISTORY_PAGE })}`),
    );
    all.push(...items);
    if (!next || items.length < HISTORY_PAGE || next === after) break;
    after = next;
  }
  all.sort(
    (a, b) =>
      (b.resolved_at_ms ?? 0) - (a.resolved_at_ms ?? 0) || (a.approval_id < b.approval_id ? 1 : -1),
  );
  const shown = all.slice(0, MAX_HISTORY);
  reconcile($("history-list"), shown, (a) => a.approval_id, historyItem);
  $("history-empty").hidden = shown.length > 0;
}

function historyItem(a) {
  const allowed = a.decision === "allow";
  return h(
    "li",
    {
      class: `history-item ${allowed ? "allowed" : "denied"}`,
      testid: "history-item",
      data: { approvalId: a.approval_id, decision: a.decision ?? "" },
    },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: a.tool }),
      badge(allowed ? "allowed" : "denied", "decision"),
      h("span", { class: "muted", testid: "history-scope", text: `scope ${a.scope ?? "once"}` }),
    ),
    h(
      "div",
      { class: "history-who" },
      h("span", { class: "decided-by", testid: "history-by", text: `by ${a.decided_by || "?"}` }),
      h("span", {
        class: "muted",
        testid: "history-when",
        text: when(a.resolved_at_ms),
        title: a.resolved_at_ms ? new Date(a.resolved_at_ms).toISOString() : "",
      }),
    ),
    a.covers
      ? h("div", { class: "detail", testid: "history-covers", text: `covers: ${a.covers}` })
      : null,
    a.decided_reason
      ? h("div", { class: "detail", testid: "history-reason", text: `reason: ${a.decided_reason}` })
      : null,
    h("pre", { class: "args", text: pretty(a.arguments) }),
    h(
      "div",
      { class: "item-meta" },
      runLink(a.run_id),
      h("span", { text: `started by ${a.principal}` }),
      a.waited_ms ? h("span", { text: `after ${(a.waited_ms / 1000).toFixed(1)}s` }) : null,
    ),
  );
}
