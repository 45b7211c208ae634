// The sessions page: the sessions the principal may read, the selected session (who owns it,
// the composer, its runs, its compaction checkpoints and its tool postures), beside the run
// pane (tape.js) and the approvals pane (approvals.js).

import { ApiError, api, enc, q, readAll } from "./api.js";
import {
  $,
  badge,
  clock,
  h,
  onEnter,
  pairs,
  plural,
  reconcile,
  reportError,
  runLink,
  sessionLink,
  shortId,
  stamp,
  toast,
} from "./dom.js";
import { can, canSomewhere, ownerOf, sessionName, state } from "./state.js";
import { openRun, renderNoRun, renderRunSummary, updateCancel } from "./tape.js";

const PAGE = 100;
const MAX_SESSIONS = 2000;
const MAX_RUNS = 1000;
const POSTURES = ["always_allow", "ask_each_time", "disabled"];

// --- sessions -------------------------------------------------------------------------------

export async function refreshSessions() {
  // The API pages sessions oldest first; the console shows the most recently active first, so
  // it reads every page (up to MAX_SESSIONS) and sorts.
  const all = await readAll((after) => `/v1/sessions${q({ after, limit: PAGE })}`, MAX_SESSIONS);
  all.sort((a, b) => b.updated_at_ms - a.updated_at_ms || (a.session_id < b.session_id ? 1 : -1));
  for (const s of all) state.sessions.set(s.session_id, s);
  reconcile($("sessions-list"), all, (s) => s.session_id, sessionItem);
  markSelected();
  applyWorkPermissions();
  renderSessionFacts();
  $("sessions-empty").hidden = all.length > 0;
  $("sessions-capped").hidden = all.length < MAX_SESSIONS;
}

function sessionItem(s) {
  return h(
    "li",
    {
      class: `item${s.session_id === state.sessionId ? " selected" : ""}`,
      tabindex: 0,
      testid: "session",
      data: { sessionId: s.session_id },
      on: {
        click: () => selectSession(s.session_id),
        keydown: onEnter(() => selectSession(s.session_id)),
      },
    },
    h("div", { class: "item-title", text: sessionName(s) }),
    h(
      "div",
      { class: "item-meta" },
      h("span", { class: "owner", text: s.principal }),
      h("span", { text: plural(s.runs, "run") }),
      s.parent_session_id ? h("span", { text: "branch" }) : null,
      stamp(s.updated_at_ms),
    ),
  );
}

/** Select a session (its runs, checkpoints and postures); the open run stays open. */
export function selectSession(id) {
  if (state.sessionId === id) return;
  state.sessionId = id;
  $("runs-list").replaceChildren();
  $("checkpoints-list").replaceChildren();
  $("postures-list").replaceChildren();
  renderSessionHead();
  writeRoute();
  refreshSession().catch(reportError);
}

/** Everything of the selected session the page shows; one the principal may not read (a
 * link to someone else's) says so in the pane instead. */
export async function refreshSession() {
  const sid = state.sessionId;
  if (!sid) return;
  const problem = $("session-problem");
  try {
    await Promise.all([refreshRuns(), refreshCheckpoints(), refreshPostures(), readSession()]);
    problem.textContent = "";
  } catch (exc) {
    if (!(exc instanceof ApiError && [403, 404].includes(exc.status))) throw exc;
    if (sid === state.sessionId)
      problem.textContent = `This session cannot be shown: ${exc.message}`;
  }
}

/** The selected session's record, when the list has not read it (a link to it). */
async function readSession() {
  const sid = state.sessionId;
  if (!sid || state.sessions.has(sid)) return;
  try {
    state.sessions.set(sid, await api.get(`/v1/sessions/${enc(sid)}`));
  } catch (exc) {
    if (!(exc instanceof ApiError && [403, 404].includes(exc.status))) throw exc;
    return;
  }
  if (sid === state.sessionId) renderSessionHead();
}

export function markSelected() {
  for (const li of $("sessions-list").children) {
    const on = li.dataset.sessionId === state.sessionId;
    li.classList.toggle("selected", on);
    li.setAttribute("aria-current", String(on));
  }
  for (const li of $("runs-list").children) {
    const on = li.dataset.runId === state.runId;
    li.classList.toggle("selected", on);
    li.setAttribute("aria-current", String(on));
  }
}

export function renderSessionHead() {
  markSelected();
  const sid = state.sessionId;
  $("session-id").textContent = sid ?? "";
  $("session-name").textContent = sid ? sessionName(state.sessions.get(sid), sid) : "";
  $("composer-hint").textContent = sid
    ? "Sends to the selected session."
    : "A new session is created if none is selected.";
  for (const id of ["session-facts", "checkpoints-section", "postures-section"])
    $(id).hidden = !sid;
  renderSessionFacts();
  applyWorkPermissions();
  if (!sid) {
    $("runs-list").replaceChildren();
    $("runs-empty").hidden = false;
    $("runs-empty").textContent = "Select a session to see its runs.";
  }
}

function renderSessionFacts() {
  const s = state.sessions.get(state.sessionId);
  const facts = $("session-facts");
  if (!s) {
    facts.replaceChildren();
    return;
  }
  $("session-name").textContent = sessionName(s);
  const made = pairs([
    ["owner", h("span", { testid: "session-owner", text: s.principal })],
    ["key", s.session_key],
    ["created", stamp(s.created_at_ms)],
    ["runs", s.runs],
    ["resets", s.resets || ""],
    ["branched from", s.parent_session_id ? sessionLink(s.parent_session_id) : ""],
    ["at run", s.branched_from_run_id ? runLink(s.branched_from_run_id) : ""],
  ]);
  facts.replaceChildren(...made.children);
}

/** Show only the controls the principal may use on the selected session (hidden, not disabled). */
export function applyWorkPermissions() {
  const sid = state.sessionId;
  const owner = ownerOf(sid);
  $("new-session").hidden = !can("session.create");
  $("approvals-readonly").hidden = canSomewhere("approval.resolve");
  const composes = sid
    ? can("run.start", owner)
    : can("session.create") && canSomewhere("run.start");
  $("composer").hidden = !composes;
  $("composer-readonly").hidden = composes;
  $("posture-form").hidden = !(sid && can("posture.set", owner));
  $("compact-session").hidden = !(sid && can("session.compact", owner));
  updateCancel();
}

/** The work page's address: the selected session and open run (never a token). */
export function writeRoute() {
  if (state.view !== "work") return;
  const params = new URLSearchParams();
  if (state.sessionId) params.set("session", state.sessionId);
  if (state.runId) params.set("run", state.runId);
  const hash = params.toString();
  history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

async function createSession() {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}`;
  const label = `console ${day} ${pad(now.getHours())}:${pad(now.getMinutes())}`;
  const s = await api.post("/v1/sessions", { label });
  state.sessions.set(s.session_id, s);
  renderNoRun();
  selectSession(s.session_id);
  await refreshSessions();
  $("message-input").focus();
  return s.session_id;
}

// --- runs of the session --------------------------------------------------------------------

export async function refreshRuns() {
  const sid = state.sessionId;
  if (!sid) return;
  const runs = await readAll(
    (after) => `/v1/sessions/${enc(sid)}/runs${q({ after, limit: PAGE })}`,
    MAX_RUNS,
  );
  if (sid !== state.sessionId) return;
  // Newest first: the API pages oldest first by run id (ULIDs sort by time).
  runs.sort((a, b) => b.accepted_at_ms - a.accepted_at_ms || (a.run_id < b.run_id ? 1 : -1));
  reconcile($("runs-list"), runs, (r) => r.run_id, runItem);
  markSelected();
  $("runs-empty").textContent = "No runs in this session yet.";
  $("runs-empty").hidden = runs.length > 0;
  const current = runs.find((r) => r.run_id === state.runId);
  if (current) renderRunSummary(current);
}

function runItem(r) {
  return h(
    "li",
    {
      class: `item${r.run_id === state.runId ? " selected" : ""}`,
      tabindex: 0,
      testid: "run",
      data: { runId: r.run_id, state: r.state },
      on: { click: () => openRun(r.run_id), keydown: onEnter(() => openRun(r.run_id)) },
    },
    h(
      "div",
      { class: "item-title" },
      badge(r.state),
      " ",
      h("span", { class: "mono", text: shortId(r.run_id) }),
    ),
    h(
      "div",
      { class: "item-meta" },
      h("span", { text: clock(r.accepted_at_ms) }),
      h("span", { text: r.principal }),
      h("span", { text: plural(r.turns, "turn") }),
      h("span", { text: plural(r.tool_calls, "tool call") }),
    ),
  );
}

async function sendMessage(ev) {
  ev.preventDefault();
  const input = $("message-input");
  const text = input.value;
  if (!text.trim()) {
    toast("Type a message first.", "error");
    input.focus();
    return;
  }
  const button = $("send-button");
  button.disabled = true;
  try {
    const sid = state.sessionId || (await createSession());
    const ticket = await api.post(`/v1/sessions/${enc(sid)}/messages`, { text });
    input.value = "";
    if (ticket.session_id && ticket.session_id !== state.sessionId)
      selectSession(ticket.session_id);
    openRun(ticket.run_id);
    refreshRuns().catch(() => {});
    refreshSessions().catch(() => {});
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
  }
}

// --- compaction checkpoints -----------------------------------------------------------------

/** GET /v1/sessions/{id}/checkpoints, newest first; the one in force is marked. */
async function refreshCheckpoints() {
  const sid = state.sessionId;
  if (!sid) return;
  const data = await api.get(`/v1/sessions/${enc(sid)}/checkpoints`);
  if (sid !== state.sessionId) return;
  const items = [...(data.items ?? [])].reverse();
  reconcile($("checkpoints-list"), items, (c) => c.checkpoint_id, checkpointItem);
  $("checkpoints-count").textContent = String(items.length);
  $("checkpoints-empty").hidden = items.length > 0;
}

function checkpointItem(c) {
  const owner = ownerOf(state.sessionId);
  const restore =
    !c.in_force && can("session.restore", owner)
      ? h("button", {
          type: "button",
          class: "small",
          testid: "restore-checkpoint",
          text: "Restore",
          on: { click: (ev) => restoreCheckpoint(c.checkpoint_id, ev.target) },
        })
      : null;
  return h(
    "li",
    { class: "card", testid: "checkpoint", data: { checkpointId: c.checkpoint_id } },
    h(
      "div",
      { class: "head" },
      c.in_force ? badge("in_force", "checkpoint") : null,
      h("span", { class: "mono", text: shortId(c.checkpoint_id), title: c.checkpoint_id }),
      h("span", { class: "muted", text: `${c.trigger} · ${c.method}` }),
      stamp(c.created_at_ms),
      h("span", { class: "muted", text: `by ${c.principal}` }),
    ),
    h("div", {
      class: "item-meta",
      text: `${plural(c.covers.length, "run")} condensed · ${c.tokens_before} → ${c.tokens_after} tokens`,
    }),
    h(
      "details",
      {},
      h("summary", { text: "Summary" }),
      h("pre", { class: "summary", text: c.summary }),
    ),
    restore,
  );
}

async function compactSession() {
  const sid = state.sessionId;
  const button = $("compact-session");
  button.disabled = true;
  try {
    const outcome = await api.post(`/v1/sessions/${enc(sid)}/compact`, {});
    toast(
      outcome.status === "compacted"
        ? `Compacted: ${plural(outcome.condensed ?? outcome.covers?.length ?? 0, "run")} condensed.`
        : "Compacting: the session's model is writing the summary.",
    );
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
    refreshCheckpoints().catch(() => {});
  }
}

async function restoreCheckpoint(checkpointId, button) {
  button.disabled = true;
  try {
    await api.post(`/v1/sessions/${enc(state.sessionId)}/restore`, { checkpoint: checkpointId });
    toast(`Restored checkpoint ${shortId(checkpointId)}.`);
  } catch (exc) {
    reportError(exc);
    button.disabled = false;
  } finally {
    refreshCheckpoints().catch(() => {});
  }
}

// --- tool postures --------------------------------------------------------------------------

/** GET /v1/sessions/{id}/postures: the overrides first, every tool under them. */
async function refreshPostures() {
  const sid = state.sessionId;
  if (!sid) return;
  let data;
  try {
    data = await api.get(`/v1/sessions/${enc(sid)}/postures`);
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 403) {
      $("postures-section").hidden = true; // no tool.list: the section says nothing
      return;
    }
    throw exc;
  }
  if (sid !== state.sessionId) return;
  const items = data.items ?? [];
  const overrides = items.filter((t) => t.override);
  reconcile($("postures-list"), overrides, (t) => t.tool, postureItem);
  $("postures-empty").hidden = overrides.length > 0;
  reconcile($("tools-list"), items, (t) => t.tool, toolItem);
  $("tools-count").textContent = String(items.length);
  const select = $("posture-tool");
  const chosen = select.value;
  if (select.options.length !== items.length)
    select.replaceChildren(...items.map((t) => h("option", { value: t.tool, text: t.tool })));
  if (chosen) select.value = chosen;
}

function postureItem(t) {
  return h(
    "li",
    { class: "card posture", testid: "posture-override", data: { tool: t.tool } },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: t.tool }),
      badge(t.posture, "posture"),
      h("span", { class: "muted", text: `node: ${t.node_posture.replaceAll("_", " ")}` }),
    ),
    h(
      "div",
      { class: "item-meta" },
      h("span", { testid: "posture-set-by", text: `set by ${t.set_by ?? "?"}` }),
      stamp(t.set_at_ms),
    ),
  );
}

function toolItem(t) {
  return h(
    "li",
    { class: "tool-row", testid: "tool-posture", data: { tool: t.tool, posture: t.posture } },
    h("span", { class: "tool-name", text: t.tool }),
    badge(t.risk, "risk"),
    badge(t.posture, "posture"),
    t.override ? h("span", { class: "muted small", text: "(this session)" }) : null,
    t.unavailable
      ? h("span", { class: "muted small", text: `unavailable: ${t.unavailable}` })
      : null,
  );
}

async function setPosture(ev) {
  ev.preventDefault();
  const sid = state.sessionId;
  const tool = $("posture-tool").value;
  if (!sid || !tool) return;
  const posture = $("posture-value").value || null;
  try {
    await api.post(`/v1/sessions/${enc(sid)}/postures`, { tool, posture });
    const now = posture ?? "the node's posture";
    toast(`${tool} in this session: ${now} (set by ${state.me?.principal}).`);
  } catch (exc) {
    reportError(exc);
  } finally {
    refreshPostures().catch(() => {});
  }
}

// --- wiring ---------------------------------------------------------------------------------

export function wireWork() {
  $("new-session").addEventListener("click", () => createSession().catch(reportError));
  $("composer").addEventListener("submit", sendMessage);
  $("message-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("posture-form").addEventListener("submit", setPosture);
  $("compact-session").addEventListener("click", compactSession);
  $("posture-value").replaceChildren(
    h("option", { value: "", text: "node default (no override)" }),
    ...POSTURES.map((p) => h("option", { value: p, text: p.replaceAll("_", " ") })),
  );
}
