// reel web console: plain ES module, no build step.
//
// Contract with the HTTP API (docs/http-api.md): every /v1 call carries
// `Authorization: Bearer <token>`; the token lives in sessionStorage only (never in a URL or
// localStorage). A run's tape is followed over Server-Sent Events read with fetch() and a
// streaming body reader, because EventSource cannot send the bearer header. All data reaches
// the page through textContent: no markup is ever built from data.

const TOKEN_KEY = "reel.token";
const APPROVALS_EVERY_MS = 1000;
const SESSIONS_EVERY_MS = 3000;
const RUNS_EVERY_MS = 2000;
const PAGE = 100;
const MAX_SESSIONS = 2000;
const MAX_RUNS = 1000;
const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled"]);
const FINISHED_STATES = new Set(["done", "failed", "cancelled"]);
const SCOPES = ["once", "session", "always"];

const $ = (id) => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`console markup lacks #${id}`);
  return node;
};

// --- DOM building (text only) ---------------------------------------------------------------

/** h("div", {class: "x", data: {id: "1"}, on: {click: fn}}, "text", child) */
function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "data")
      for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
    else if (key === "on")
      for (const [k, fn] of Object.entries(value)) node.addEventListener(k, fn);
    else if (key === "testid") node.dataset.testid = String(value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function clear(node) {
  node.replaceChildren();
}

/**
 * Make `list` show `items` in order, re-rendering only the items whose data changed, so a
 * poll does not replace the element under the pointer or reset keyboard focus.
 */
function reconcile(list, items, keyOf, render) {
  const old = new Map([...list.children].map((li) => [li.dataset.key, li]));
  const nodes = items.map((item) => {
    const key = keyOf(item);
    const sig = JSON.stringify(item);
    const li = old.get(key);
    if (li && li.dataset.sig === sig) return li;
    const fresh = render(item);
    fresh.dataset.key = key;
    fresh.dataset.sig = sig;
    if (li && document.activeElement === li) queueMicrotask(() => fresh.focus());
    return fresh;
  });
  const same =
    nodes.length === list.children.length && nodes.every((n, i) => list.children[i] === n);
  if (!same) list.replaceChildren(...nodes);
}

function shortId(id) {
  if (!id) return "";
  return id.length > 10 ? `${id.slice(0, 4)}…${id.slice(-6)}` : id;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function clock(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(ms).toLocaleDateString();
}

function until(ms) {
  if (!ms) return "";
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return "expiring";
  if (s < 120) return `expires in ${s}s`;
  return `expires in ${Math.round(s / 60)}m`;
}

/** JSON for people: one line when short, indented otherwise; raw text stays as it is. */
function pretty(value) {
  let v = value;
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch {
      return value;
    }
  }
  try {
    const line = JSON.stringify(v);
    return line.length <= 72 ? line : JSON.stringify(v, null, 2);
  } catch {
    return String(value);
  }
}

function toast(message, kind = "info") {
  const node = h("div", { class: `toast ${kind}`, text: message });
  $("toasts").append(node);
  setTimeout(() => node.remove(), kind === "error" ? 8000 : 4000);
}

function badge(state, extra = "") {
  return h("span", {
    class: `badge state-${state} ${extra}`.trim(),
    text: state.replace("_", " "),
  });
}

// --- API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

/** The error message of an API error body, whatever its exact shape. */
function errorMessage(body, fallback) {
  if (!body || typeof body !== "object") return fallback;
  const err = body.error ?? body;
  if (typeof err === "string") return body.message ? `${err}: ${body.message}` : err;
  const parts = [err.message ?? err.detail ?? err.problem ?? err.title ?? err.code];
  if (err.field && !String(parts[0] ?? "").includes(err.field)) parts.unshift(`${err.field}:`);
  const text = parts.filter(Boolean).join(" ");
  return text || fallback;
}

const api = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  },

  async request(method, path, body) {
    const init = {
      method,
      headers: this.headers({ Accept: "application/json" }),
      cache: "no-store",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (exc) {
      throw new ApiError(0, "the node is unreachable");
    }
    return this.decode(res);
  },

  async decode(res) {
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (res.status === 401) {
      expire();
      throw new ApiError(401, "the token was not accepted");
    }
    if (!res.ok) {
      const fallback = `${res.status} ${res.statusText || "error"}`;
      throw new ApiError(res.status, errorMessage(data, fallback), data?.error?.field);
    }
    return data;
  },

  get(path) {
    return this.request("GET", path);
  },
  post(path, body) {
    return this.request("POST", path, body ?? {});
  },
};

function q(params) {
  const usp = new URLSearchParams();
  for (const [k, v] of Object.entries(params))
    if (v !== undefined && v !== null && v !== "") usp.set(k, v);
  const s = usp.toString();
  return s ? `?${s}` : "";
}

const enc = encodeURIComponent;

/** The list and cursor of a paged response ({items, next_after}); tolerates a bare list. */
function page(data) {
  if (Array.isArray(data)) return { items: data, next: null };
  return { items: data?.items ?? [], next: data?.next_after ?? null };
}

// --- SSE over fetch -------------------------------------------------------------------------

/**
 * Follow a run's tape: call onEntry(entry) for every TapeEntry in tape_seq order, exactly once
 * each, reconnecting (Last-Event-ID / ?after=) until a terminal entry arrives or the signal
 * aborts. onStatus(text) reports the connection state.
 */
async function followTape(runId, signal, onEntry, onStatus) {
  let last = -1;
  let ended = false;
  let failures = 0;
  let misses = 0;
  const deliver = (entry) => {
    if (typeof entry?.tape_seq !== "number" || entry.tape_seq <= last) return;
    last = entry.tape_seq;
    onEntry(entry);
    if (TERMINAL.has(entry.kind)) ended = true;
  };
  while (!signal.aborted && !ended) {
    onStatus(failures ? "reconnecting" : "connecting");
    try {
      const headers = api.headers({ Accept: "text/event-stream" });
      if (last >= 0) headers["Last-Event-ID"] = String(last);
      const url = `/v1/runs/${enc(runId)}/events${last >= 0 ? q({ after: last }) : ""}`;
      const res = await fetch(url, { headers, signal, cache: "no-store" });
      if (!res.ok || !res.body) {
        await api.decode(res); // raises with the API's message (and logs out on 401)
        throw new ApiError(res.status, "the event stream has no body");
      }
      onStatus("live");
      failures = 0;
      misses = 0;
      await readEvents(res.body, signal, (event) => {
        if (!event.data) return;
        let entry;
        try {
          entry = JSON.parse(event.data);
        } catch {
          return;
        }
        deliver(entry);
      });
    } catch (exc) {
      if (signal.aborted) return;
      if (exc instanceof ApiError && exc.status === 401) {
        onStatus("logged out");
        return;
      }
      // A run started a moment ago may not be in the views yet: a 404 is retried for a while.
      if (exc instanceof ApiError && exc.status === 404 && ++misses > 20) {
        onStatus("unknown run");
        return;
      }
      failures += 1;
    }
    if (!ended && !signal.aborted && misses === 0) {
      // The stream ended before the run did (a restart, a proxy time-out): read the tape
      // page-wise to catch up, then listen again.
      try {
        await catchUp(runId, () => last, deliver);
      } catch {
        failures += 1;
      }
    }
    if (!ended && !signal.aborted) {
      await sleep(misses ? 250 : Math.min(5000, 250 * 2 ** Math.min(failures, 5)), signal);
    }
  }
  if (ended) onStatus("ended");
}

async function catchUp(runId, lastSeq, deliver) {
  for (;;) {
    const after = lastSeq();
    const data = await api.get(
      `/v1/runs/${enc(runId)}/tape${q({ after: after >= 0 ? after : undefined, limit: 500 })}`,
    );
    const { items } = page(data);
    items.forEach(deliver);
    if (items.length < 500) return;
  }
}

/** Parse a text/event-stream body: calls onEvent({id, event, data}) per dispatched event. */
async function readEvents(body, signal, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const stop = () => reader.cancel().catch(() => {});
  signal.addEventListener("abort", stop, { once: true });
  let buf = "";
  let cur = { id: null, event: "message", data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (cur.data.length) onEvent({ id: cur.id, event: cur.event, data: cur.data.join("\n") });
          cur = { id: cur.id, event: "message", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue; // comment / keep-alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") cur.data.push(val);
        else if (field === "event") cur.event = val;
        else if (field === "id") cur.id = val;
      }
    }
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });
}

// --- state ----------------------------------------------------------------------------------

const state = {
  sessionId: null,
  runId: null,
  tapeAbort: null,
  runState: null,
  approvals: new Map(), // approval_id -> queue <li>
  resolved: new Set(), // approval ids seen resolved (tape or queue)
  timers: [],
};

function readRoute() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { session: params.get("session"), run: params.get("run") };
}

function writeRoute() {
  const params = new URLSearchParams();
  if (state.sessionId) params.set("session", state.sessionId);
  if (state.runId) params.set("run", state.runId);
  const hash = params.toString();
  history.replaceState(null, "", hash ? `#${hash}` : location.pathname);
}

// --- login ----------------------------------------------------------------------------------

function showLogin(message = "") {
  stopAll();
  $("app-view").hidden = true;
  $("logout").hidden = true;
  $("node-status").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message;
  $("token-input").value = "";
  $("token-input").focus();
}

function expire() {
  if (!api.token) return;
  api.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("The token was not accepted (or the node's token changed). Log in again.");
}

async function login(token) {
  api.token = token;
  try {
    await api.get(`/v1/sessions${q({ limit: 1 })}`);
  } catch (exc) {
    api.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(
      exc.status === 401 ? "That token was not accepted." : `Cannot log in: ${exc.message}`,
    );
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
}

function logout() {
  api.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  state.sessionId = null;
  state.runId = null;
  history.replaceState(null, "", location.pathname);
  showLogin("");
}

// --- polling --------------------------------------------------------------------------------

function every(ms, fn) {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden || !api.token) return;
    busy = true;
    try {
      await fn();
      setNodeStatus(true);
    } catch (exc) {
      if (exc instanceof ApiError && exc.status !== 401)
        setNodeStatus(false, exc.status ? exc.message : "");
    } finally {
      busy = false;
    }
  };
  state.timers.push(setInterval(tick, ms));
  tick();
}

function setNodeStatus(up, problem = "") {
  const node = $("node-status");
  node.hidden = false;
  node.textContent = up ? "connected" : problem ? "API error" : "node unreachable";
  node.title = problem;
  node.className = `node-status ${up ? "up" : "down"}`;
}

function stopAll() {
  state.timers.forEach(clearInterval);
  state.timers = [];
  state.tapeAbort?.abort();
  state.tapeAbort = null;
}

function start() {
  stopAll();
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  $("logout").hidden = false;
  const route = readRoute();
  state.sessionId = route.session;
  state.runId = route.run;
  clear($("approvals-list"));
  state.approvals.clear();
  every(APPROVALS_EVERY_MS, refreshApprovals);
  every(SESSIONS_EVERY_MS, refreshSessions);
  every(RUNS_EVERY_MS, refreshRuns);
  renderSessionHead();
  if (state.runId) openRun(state.runId);
  else renderNoRun();
}

// --- sessions -------------------------------------------------------------------------------

async function refreshSessions() {
  // The API pages sessions oldest first; the console shows the most recently active first, so
  // it reads every page (up to MAX_SESSIONS) and sorts.
  const all = await readAll((after) => `/v1/sessions${q({ after, limit: PAGE })}`, MAX_SESSIONS);
  all.sort((a, b) => b.updated_at_ms - a.updated_at_ms || (a.session_id < b.session_id ? 1 : -1));
  const list = $("sessions-list");
  reconcile(list, all, (s) => s.session_id, sessionItem);
  markSelected();
  $("sessions-empty").hidden = all.length > 0;
  $("sessions-capped").hidden = all.length < MAX_SESSIONS;
}

/** Every item of a paged route, following next_after, at most `cap` items. */
async function readAll(pathFor, cap) {
  const out = [];
  let after;
  for (;;) {
    const { items, next } = page(await api.get(pathFor(after)));
    out.push(...items);
    if (!next || items.length < PAGE || out.length >= cap || next === after)
      return out.slice(0, cap);
    after = next;
  }
}

function sessionName(s) {
  return s.label || s.session_key || shortId(s.session_id);
}

function sessionItem(s) {
  const li = h(
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
      h("span", { text: plural(s.runs, "run") }),
      s.parent_session_id ? h("span", { text: "branch" }) : null,
      h("span", { text: ago(s.updated_at_ms), title: new Date(s.updated_at_ms).toLocaleString() }),
    ),
  );
  return li;
}

function onEnter(fn) {
  return (ev) => {
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      fn();
    }
  };
}

function selectSession(id) {
  if (state.sessionId === id) return;
  state.sessionId = id;
  markSelected();
  clear($("runs-list"));
  renderSessionHead();
  writeRoute();
  refreshRuns().catch(reportError);
}

function markSelected() {
  for (const li of $("sessions-list").children)
    li.classList.toggle("selected", li.dataset.sessionId === state.sessionId);
  for (const li of $("runs-list").children)
    li.classList.toggle("selected", li.dataset.runId === state.runId);
}

function renderSessionHead() {
  markSelected();
  $("session-id").textContent = state.sessionId ? state.sessionId : "";
  $("session-id").title = state.sessionId ? "session id" : "";
  $("composer-hint").textContent = state.sessionId
    ? "Sends to the selected session."
    : "A new session is created if none is selected.";
  if (!state.sessionId) {
    clear($("runs-list"));
    $("runs-empty").hidden = false;
    $("runs-empty").textContent = "Select a session to see its runs.";
  }
}

async function createSession() {
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}`;
  const label = `console ${day} ${pad(now.getHours())}:${pad(now.getMinutes())}`;
  const s = await api.post("/v1/sessions", { label });
  state.sessionId = s.session_id;
  state.runId = null;
  renderSessionHead();
  renderNoRun();
  writeRoute();
  await refreshSessions();
  await refreshRuns();
  $("message-input").focus();
  return s.session_id;
}

// --- runs of a session ----------------------------------------------------------------------

async function refreshRuns() {
  const sid = state.sessionId;
  if (!sid) return;
  const runs = await readAll(
    (after) => `/v1/sessions/${enc(sid)}/runs${q({ after, limit: PAGE })}`,
    MAX_RUNS,
  );
  if (sid !== state.sessionId) return;
  // Newest first: the API pages oldest first by run id (ULIDs sort by time).
  runs.sort((a, b) => b.accepted_at_ms - a.accepted_at_ms || (a.run_id < b.run_id ? 1 : -1));
  const list = $("runs-list");
  reconcile(list, runs, (r) => r.run_id, runItem);
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
      state.sessionId = ticket.session_id;
    openRun(ticket.run_id);
    refreshRuns().catch(() => {});
    refreshSessions().catch(() => {});
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
  }
}

// --- a run's tape ---------------------------------------------------------------------------

function renderNoRun() {
  state.tapeAbort?.abort();
  state.tapeAbort = null;
  clear($("tape"));
  $("tape-empty").hidden = false;
  $("run-id").textContent = "";
  $("run-state").hidden = true;
  $("cancel-run").hidden = true;
  $("run-summary").hidden = true;
  $("stream-status").textContent = "";
}

function openRun(runId) {
  state.tapeAbort?.abort();
  state.runId = runId;
  state.runState = null;
  writeRoute();
  markSelected();
  const tape = $("tape");
  clear(tape);
  tape.dataset.runId = runId;
  $("tape-empty").hidden = true;
  $("run-id").textContent = runId;
  $("run-summary").hidden = true;
  setRunState("accepted");
  const abort = new AbortController();
  state.tapeAbort = abort;
  const ctx = { runId, outputs: new Map(), approvalCards: new Map() };
  api
    .get(`/v1/runs/${enc(runId)}`)
    .then((run) => {
      if (abort.signal.aborted) return;
      if (run.session_id && run.session_id !== state.sessionId) {
        state.sessionId = run.session_id;
        renderSessionHead();
        writeRoute();
        refreshRuns().catch(() => {});
      }
      renderRunSummary(run);
    })
    .catch((exc) => {
      // Not in the views yet (just started): the summary comes with the terminal entry.
      if (!(exc instanceof ApiError && exc.status === 404)) reportError(exc);
    });
  followTape(
    runId,
    abort.signal,
    (entry) => {
      if (abort.signal.aborted) return;
      renderEntry(ctx, entry);
    },
    (status) => {
      if (abort.signal.aborted) return;
      const node = $("stream-status");
      node.textContent = status;
      node.className = `stream-status ${status.replace(" ", "-")}`;
    },
  );
}

function setRunState(s) {
  state.runState = s;
  const node = $("run-state");
  node.hidden = false;
  node.textContent = s.replace("_", " ");
  node.className = `badge state-${s}`;
  node.dataset.state = s;
  $("cancel-run").hidden = FINISHED_STATES.has(s);
}

function renderRunSummary(run) {
  if (run.run_id !== state.runId) return;
  if (FINISHED_STATES.has(run.state) || !FINISHED_STATES.has(state.runState))
    setRunState(run.state);
  const dl = $("run-summary");
  clear(dl);
  const pair = (k, v) =>
    v === null || v === undefined || v === ""
      ? null
      : h("div", {}, h("dt", { text: k }), h("dd", { text: v }));
  append(dl, [
    pair("turns", run.turns),
    pair("tool calls", run.tool_calls),
    pair("tokens", `${run.prompt_tokens} in / ${run.completion_tokens} out`),
    pair("accepted", clock(run.accepted_at_ms)),
    pair("ended", clock(run.ended_at_ms)),
    pair("reason", run.termination_reason),
    pair("principal", run.principal),
  ]);
  dl.hidden = false;
}

async function cancelRun() {
  if (!state.runId) return;
  try {
    await api.post(`/v1/runs/${enc(state.runId)}/cancel`, {});
    toast("Cancel requested.");
  } catch (exc) {
    reportError(exc);
  }
}

const KIND_LABEL = {
  "run.accepted": "message",
  "run.started": "started",
  "run.output": "output",
  "run.turn_completed": "turn",
  "run.awaiting_approval": "waiting",
  "run.resumed": "resumed",
  "run.completed": "done",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
  "tool.proposed": "tool call",
  "tool.decided": "decision",
  "tool.approval_requested": "approval",
  "tool.approval_resolved": "approval",
  "tool.completed": "result",
};

const RUN_STATE_OF = {
  "run.accepted": "accepted",
  "run.started": "in_progress",
  "run.resumed": "in_progress",
  "run.awaiting_approval": "awaiting_approval",
  "run.completed": "done",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
};

function renderEntry(ctx, entry) {
  const tape = $("tape");
  const pane = tape.parentElement;
  const stick = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 48;
  const follow = () => {
    if (stick) pane.scrollTop = pane.scrollHeight;
  };
  const ev = entry.event ?? {};
  const kind = entry.kind ?? ev.kind;
  const next = RUN_STATE_OF[kind];
  if (next) setRunState(next);

  // Streamed output: consecutive chunks of one turn grow one block.
  if (kind === "run.output") {
    const last = tape.lastElementChild;
    const block = ctx.outputs.get(ev.turn);
    if (block && last === block.li) {
      block.text.append(document.createTextNode(ev.text ?? ""));
      block.li.dataset.lastSeq = entry.tape_seq;
      follow();
      return;
    }
  }

  const li = h("li", {
    class: `entry kind-${kind.replace(".", "-")}`,
    testid: "tape-entry",
    data: { kind, seq: entry.tape_seq },
  });
  const gutter = h(
    "div",
    { class: "gutter" },
    h("span", { class: "seq", text: `#${entry.tape_seq}` }),
    h("span", { class: "time", text: clock(entry.recorded_at_ms) }),
  );
  const body = h("div", { class: "entry-body" });
  const label = h("span", { class: "kind", text: KIND_LABEL[kind] ?? kind, title: kind });
  li.append(gutter, body);

  switch (kind) {
    case "run.accepted":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          ev.channel ? h("span", { class: "muted", text: `via ${ev.channel}` }) : null,
        ),
        h("pre", { class: "user-text", text: ev.text ?? "" }),
      ]);
      break;
    case "run.started":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "muted", text: [ev.provider, ev.model].filter(Boolean).join(" · ") }),
          h("span", {
            class: "muted",
            text: `budget: ${[
              plural(ev.max_turns, "turn"),
              plural(ev.max_tool_calls, "tool call"),
              `${ev.wall_clock_s}s`,
            ].join(", ")}`,
          }),
        ),
      ]);
      break;
    case "run.output": {
      const text = h("pre", { class: "output-text", testid: "output-text", text: ev.text ?? "" });
      append(body, [
        h("div", { class: "head" }, label, h("span", { class: "muted", text: `turn ${ev.turn}` })),
        text,
      ]);
      ctx.outputs.set(ev.turn, { li, text });
      break;
    }
    case "run.turn_completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", {
            class: "muted",
            text: [
              `turn ${ev.turn}`,
              ev.finish_reason,
              `${ev.prompt_tokens} in / ${ev.completion_tokens} out tokens`,
              plural(ev.tool_calls, "tool call"),
            ].join(" · "),
          }),
        ),
      ]);
      break;
    case "tool.proposed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          h("span", { class: "muted mono", text: ev.call_id }),
        ),
        h("pre", { class: "args", testid: "tool-args", text: pretty(ev.arguments) }),
      ]);
      break;
    case "tool.decided":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.outcome ?? "unknown", "outcome"),
        ),
        h(
          "div",
          { class: "detail" },
          ev.reason ? h("span", { text: ev.reason }) : null,
          ev.posture ? h("span", { class: "muted", text: `posture ${ev.posture}` }) : null,
          ev.grant ? h("span", { class: "muted", text: `grant ${ev.grant}` }) : null,
        ),
        ev.policy_ids?.length
          ? h(
              "div",
              { class: "policies" },
              h("span", { class: "muted", text: "policies:" }),
              ev.policy_ids.map((p) => h("code", { class: "policy", text: p })),
            )
          : null,
      ]);
      break;
    case "tool.approval_requested": {
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.risk ?? "unknown", "risk"),
          h("span", { class: "muted", text: until(ev.expires_at_ms) }),
        ),
        h("pre", { class: "args", text: pretty(ev.arguments) }),
      ]);
      const controls = approvalControls(ev.approval_id, ev.scope_options, "tape");
      body.append(controls);
      ctx.approvalCards.set(ev.approval_id, controls);
      if (state.resolved.has(ev.approval_id)) markResolved(controls, null);
      break;
    }
    case "run.awaiting_approval":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "muted", text: `for approval ${shortId(ev.approval_id)}` }),
        ),
      ]);
      break;
    case "tool.approval_resolved": {
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.decision === "allow" ? "allowed" : "denied", "decision"),
          h("span", { class: "muted", text: `scope ${ev.scope}` }),
          ev.decided_by ? h("span", { class: "muted", text: `by ${ev.decided_by}` }) : null,
          ev.waited_ms
            ? h("span", { class: "muted", text: `after ${(ev.waited_ms / 1000).toFixed(1)}s` })
            : null,
        ),
        ev.reason ? h("div", { class: "detail", text: ev.reason }) : null,
      ]);
      state.resolved.add(ev.approval_id);
      const controls = ctx.approvalCards.get(ev.approval_id);
      if (controls) markResolved(controls, ev);
      dropFromQueue(ev.approval_id);
      break;
    }
    case "run.resumed":
      append(body, [h("div", { class: "head" }, label)]);
      break;
    case "tool.completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.ok ? "ok" : "error", "result"),
          ev.error_kind ? h("span", { class: "muted", text: ev.error_kind }) : null,
          ev.truncated ? h("span", { class: "muted", text: "truncated" }) : null,
          ev.duration_ms ? h("span", { class: "muted", text: `${ev.duration_ms} ms` }) : null,
        ),
        ev.output
          ? h("pre", { class: "tool-output", testid: "tool-output", text: pretty(ev.output) })
          : null,
        ev.error ? h("pre", { class: "tool-error", text: ev.error }) : null,
      ]);
      break;
    case "run.completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("done", "terminal"),
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
        h("pre", { class: "answer", testid: "answer", text: ev.answer ?? "" }),
      ]);
      break;
    case "run.failed":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("failed", "terminal"),
          h("span", { text: ev.reason }),
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
        ev.message ? h("pre", { class: "tool-error", text: ev.message }) : null,
      ]);
      break;
    case "run.cancelled":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("cancelled", "terminal"),
          h("span", { text: ev.reason }),
          ev.requested_by ? h("span", { class: "muted", text: `by ${ev.requested_by}` }) : null,
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
      ]);
      break;
    default:
      append(body, [
        h("div", { class: "head" }, label),
        h("pre", { class: "args", text: pretty(ev) }),
      ]);
  }
  tape.append(li);
  if (TERMINAL.has(kind)) {
    api
      .get(`/v1/runs/${enc(ctx.runId)}`)
      .then(renderRunSummary)
      .catch(() => {});
    refreshRuns().catch(() => {});
  }
  follow();
}

function terminalStats(ev) {
  const parts = [];
  if (ev.turns !== undefined) parts.push(plural(ev.turns, "turn"));
  if (ev.tool_calls !== undefined) parts.push(plural(ev.tool_calls, "tool call"));
  if (ev.prompt_tokens !== undefined)
    parts.push(`${ev.prompt_tokens} in / ${ev.completion_tokens} out tokens`);
  return parts.join(" · ");
}

// --- approvals ------------------------------------------------------------------------------

/** Scope choice plus allow / deny buttons for one approval (used by the queue and the tape). */
function approvalControls(approvalId, scopeOptions, where) {
  const scopes = (scopeOptions?.length ? scopeOptions : SCOPES).filter((s) => SCOPES.includes(s));
  const name = `scope-${where}-${approvalId}`;
  const group = h(
    "fieldset",
    { class: "scopes", testid: "scope" },
    h("legend", { class: "sr-only", text: "Scope" }),
    scopes.map((s, i) =>
      h(
        "label",
        { class: "scope" },
        h("input", {
          type: "radio",
          name,
          value: s,
          checked: i === 0,
          data: { testid: `scope-${s}` },
        }),
        h("span", { text: s }),
      ),
    ),
  );
  const chosen = () => group.querySelector("input:checked")?.value ?? "once";
  const controls = h("div", { class: "approval-controls", data: { approvalId } });
  const allow = h("button", { type: "button", class: "allow", testid: "approve", text: "Allow" });
  const deny = h("button", { type: "button", class: "deny", testid: "deny", text: "Deny" });
  const decide = (decision) => resolveApproval(approvalId, decision, chosen(), [allow, deny]);
  allow.addEventListener("click", () => decide("allow"));
  deny.addEventListener("click", () => decide("deny"));
  append(controls, [group, h("div", { class: "buttons" }, allow, deny)]);
  return controls;
}

async function resolveApproval(approvalId, decision, scope, buttons) {
  buttons.forEach((b) => (b.disabled = true));
  try {
    await api.post(`/v1/approvals/${enc(approvalId)}`, { decision, scope });
    state.resolved.add(approvalId);
    toast(`${decision === "allow" ? "Allowed" : "Denied"} (${scope}).`);
    dropFromQueue(approvalId);
    document.querySelectorAll(`.approval-controls`).forEach((c) => {
      if (c.dataset.approvalId === approvalId) markResolved(c, { decision, scope });
    });
  } catch (exc) {
    if (exc.status === 409) {
      state.resolved.add(approvalId);
      dropFromQueue(approvalId);
      toast(`Already resolved: ${exc.message}`, "error");
    } else {
      buttons.forEach((b) => (b.disabled = false));
      reportError(exc);
    }
  }
}

function markResolved(controls, ev) {
  const text = ev ? `${ev.decision === "allow" ? "allowed" : "denied"} · ${ev.scope}` : "resolved";
  controls.replaceChildren(h("span", { class: "muted resolved", text }));
  controls.classList.add("done");
}

function dropFromQueue(approvalId) {
  const li = state.approvals.get(approvalId);
  if (li) {
    li.remove();
    state.approvals.delete(approvalId);
  }
  renderApprovalsCount();
}

async function refreshApprovals() {
  const { items } = page(await api.get(`/v1/approvals${q({ state: "pending", limit: 200 })}`));
  const list = $("approvals-list");
  const live = new Set();
  for (const a of items) {
    if (a.state && a.state !== "pending") continue;
    if (state.resolved.has(a.approval_id)) continue;
    live.add(a.approval_id);
    let li = state.approvals.get(a.approval_id);
    if (!li) {
      // Keep existing cards: re-rendering would reset a scope the operator is choosing.
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
  document.title = n ? `(${n}) reel console` : "reel console";
}

function approvalItem(a) {
  return h(
    "li",
    { class: "approval", testid: "approval", data: { approvalId: a.approval_id, runId: a.run_id } },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: a.tool }),
      badge(a.risk ?? "unknown", "risk"),
      h("span", { class: "muted expiry", text: until(a.expires_at_ms) }),
    ),
    a.reason ? h("div", { class: "detail", text: a.reason }) : null,
    h("pre", { class: "args", testid: "approval-args", text: pretty(a.arguments) }),
    h(
      "div",
      { class: "item-meta" },
      h("a", {
        href: "#",
        class: "run-link",
        text: `run ${shortId(a.run_id)}`,
        on: {
          click: (ev) => {
            ev.preventDefault();
            openRun(a.run_id);
          },
        },
      }),
      h("span", { text: `session ${shortId(a.session_id)}` }),
      h("span", { text: a.principal }),
      h("span", { text: clock(a.requested_at_ms) }),
    ),
    approvalControls(a.approval_id, null, "queue"),
  );
}

// --- errors and wiring ----------------------------------------------------------------------

function reportError(exc) {
  if (exc instanceof ApiError && exc.status === 401) return; // the login screen says it
  toast(exc instanceof ApiError ? exc.message : `Unexpected error: ${exc}`, "error");
}

function wire() {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) {
      $("login-error").textContent = "Enter the admin token.";
      return;
    }
    $("login-error").textContent = "";
    login(token);
  });
  $("logout").addEventListener("click", logout);
  $("new-session").addEventListener("click", () => createSession().catch(reportError));
  $("composer").addEventListener("submit", sendMessage);
  $("message-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("cancel-run").addEventListener("click", cancelRun);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && api.token) refreshApprovals().catch(() => {});
  });
}

wire();
if (api.token) login(api.token);
else showLogin("");
