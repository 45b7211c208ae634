// reel web console: plain ES module, no build step.
//
// Contract with the HTTP API (docs/http-api.md): every /v1 call carries
// `Authorization: Bearer <token>`; the token lives in sessionStorage only (never in a URL or
// localStorage). A run's tape is followed over Server-Sent Events read with fetch() and a
// streaming body reader, because EventSource cannot send the bearer header. All data reaches
// the page through textContent: no markup is ever built from data.

const TOKEN_KEY = "reel.token";
const NOTICE_KEY = "reel.notice";
const APPROVALS_EVERY_MS = 1000;
const SESSIONS_EVERY_MS = 3000;
const RUNS_EVERY_MS = 2000;
const PAGE = 100;
const MAX_SESSIONS = 2000;
const MAX_RUNS = 1000;
const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled"]);
const FINISHED_STATES = new Set(["done", "failed", "cancelled"]);
const SCOPES = ["once", "session", "always"];
const HISTORY_EVERY_MS = 5000;
const HISTORY_PAGE = 200;
const MAX_HISTORY = 200;
const MAX_RECEIPTS = 5;
const INCIDENTS_EVERY_MS = 3000;

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
  me: null, // GET /v1/whoami: {principal, roles, token_id, may, may_own}
  sessionId: null,
  runId: null,
  runSessionId: null, // the session of the open run (its owner decides run.cancel)
  tapeAbort: null,
  runState: null,
  sessionOwners: new Map(), // session_id -> principal that created it
  approvals: new Map(), // approval_id -> queue <li>
  resolved: new Set(), // approval ids seen resolved (tape or queue)
  view: "pending", // the approvals pane's tab: pending | history
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

// --- who is logged in, and what they may do -------------------------------------------------

/**
 * Whether the logged-in principal may do `action` on something `owner` owns, per
 * GET /v1/whoami: `may` (what its roles grant on anything) or, when it owns the thing itself,
 * `may_own`. A hint for what to show: the node decides every request again (a 403 is shown).
 */
function can(action, owner) {
  const me = state.me;
  if (!me) return false;
  if (me.may?.[action]) return true;
  return Boolean(owner && owner === me.principal && me.may_own?.[action]);
}

/** Whether the principal may do `action` somewhere (on what others own, or on its own). */
function canSomewhere(action) {
  return can(action) || Boolean(state.me?.may_own?.[action]);
}

function renderWhoami() {
  const me = state.me;
  $("whoami").hidden = !me;
  if (!me) return;
  $("whoami-principal").textContent = me.principal;
  $("whoami-roles").textContent = (me.roles ?? []).join(", ");
  $("whoami").title = me.token_id ? `token ${me.token_id}` : "the node's admin.token";
}

/** Show only the controls the principal may use (hidden, not disabled). */
function applyPermissions() {
  $("new-session").hidden = !can("session.create");
  $("approvals-readonly").hidden = canSomewhere("approval.resolve");
  updateComposer();
  updatePostureForm();
  updateCancel();
}

function updateComposer() {
  const sid = state.sessionId;
  const ok = sid
    ? can("run.start", state.sessionOwners.get(sid))
    : can("session.create") && canSomewhere("run.start");
  $("composer").hidden = !ok;
  $("composer-readonly").hidden = ok;
}

function updatePostureForm() {
  const sid = state.sessionId;
  $("posture-form").hidden = !(sid && can("posture.set", state.sessionOwners.get(sid)));
}

function updateCancel() {
  const owner = state.runSessionId ? state.sessionOwners.get(state.runSessionId) : undefined;
  $("cancel-run").hidden =
    !state.runId || FINISHED_STATES.has(state.runState) || !can("run.cancel", owner);
}

// --- login ----------------------------------------------------------------------------------

function showLogin(message = "") {
  stopAll();
  $("app-view").hidden = true;
  $("logout").hidden = true;
  $("node-status").hidden = true;
  $("whoami").hidden = true;
  $("incidents").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message;
  $("token-input").value = "";
  $("token-input").focus();
}

function expire() {
  if (!state.me) return; // logging in: login() says it
  forget("The token was not accepted (expired, revoked, or the node's token changed). Log in again.");
}

/** Log in with any token of the node: GET /v1/whoami says who it speaks for. */
async function login(token) {
  api.token = token;
  let me;
  try {
    me = await api.get("/v1/whoami");
  } catch (exc) {
    api.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(
      exc.status === 401 ? "That token was not accepted." : `Cannot log in: ${exc.message}`,
    );
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.me = me;
  start();
}

/**
 * Drop the token and everything shown with it: the page is loaded again, so no control, list,
 * decision or open run of this principal is left for whoever logs in next in this tab (the
 * lists keep rendered items whose data did not change, with the controls of who drew them).
 * `notice` is said on the login form of the new page.
 */
function forget(notice = "") {
  stopAll();
  api.token = "";
  state.me = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (notice) sessionStorage.setItem(NOTICE_KEY, notice);
  location.replace(location.pathname);
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
  renderWhoami();
  const route = readRoute();
  state.sessionId = route.session;
  state.runId = route.run;
  clear($("approvals-list"));
  state.approvals.clear();
  showApprovalsView(state.view);
  applyPermissions();
  every(APPROVALS_EVERY_MS, refreshApprovals);
  every(HISTORY_EVERY_MS, () => (state.view === "history" ? refreshHistory() : null));
  every(SESSIONS_EVERY_MS, refreshSessions);
  every(RUNS_EVERY_MS, refreshRuns);
  startLearning();
  $("incidents").hidden = true;
  if (can("incident.read")) every(INCIDENTS_EVERY_MS, refreshIncidents);
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
  for (const s of all) state.sessionOwners.set(s.session_id, s.principal);
  const list = $("sessions-list");
  reconcile(list, all, (s) => s.session_id, sessionItem);
  markSelected();
  applyPermissions();
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
  applyPermissions();
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
  updateComposer();
  updatePostureForm();
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
  state.sessionOwners.set(s.session_id, s.principal);
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
  state.runSessionId = null;
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
  updateCancel();
}

function renderRunSummary(run) {
  if (run.run_id !== state.runId) return;
  state.runSessionId = run.session_id;
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
  "run.context_assembled": "context",
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
    case "run.context_assembled": {
      // What went into the model input besides the message: summary, memory, references,
      // applied learnings (preferences, procedure hints).
      const items = [];
      if (ev.compaction_id) items.push(`summary ${ev.compaction_id}`);
      for (const m of ev.memory ?? []) {
        items.push(`memory ${m.item_id} · score ${(m.final / 10000).toFixed(2)}`);
      }
      for (const r of ev.references ?? []) {
        const note = r.outcome !== "included" && r.note ? `: ${r.note}` : "";
        items.push(`@${r.kind}:${r.target} · ${r.outcome}${note}`);
      }
      for (const l of ev.learned ?? []) {
        items.push(`learned ${l.kind} · ${l.text}`);
      }
      const prior = ev.prior_runs?.length ?? 0;
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", {
            class: "muted",
            text: [
              `~${ev.estimated_input_tokens} of ${ev.budget_tokens} tokens`,
              plural(prior, "earlier run"),
              ev.dropped_runs ? `${ev.dropped_runs} left out` : null,
            ]
              .filter(Boolean)
              .join(" · "),
          }),
        ),
        items.length
          ? h("ul", { class: "context-items", testid: "context-items" }, ...items.map((t) => h("li", { text: t })))
          : null,
      ]);
      break;
    }
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
      if (can("approval.resolve", state.sessionOwners.get(ev.session_id))) {
        const controls = approvalControls(ev.approval_id, null, ev.scope_options);
        body.append(controls);
        ctx.approvalCards.set(ev.approval_id, controls);
      }
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
          h("span", { class: "muted", text: `scope ${ev.scope}${boundTo(ev)}` }),
          ev.decided_by
            ? h("span", { class: "decided-by", testid: "resolved-by", text: `by ${ev.decided_by}` })
            : null,
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

/** ", prefix 'git status'": what a session grant is bound to, when it is bound. */
function boundTo(ev) {
  if (!ev.match || ev.match === "any") return "";
  return ev.match === "prefix" ? `, prefix ${JSON.stringify(ev.prefix ?? "")}` : `, ${ev.match}`;
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
function approvalControls(approvalId, record, fallbackScopes) {
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
    if (state.view === "history") refreshHistory().catch(() => {});
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
function markResolved(controls, info) {
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
  document.title = n ? `(${n}) reel console` : "reel console";
}

function runLink(runId) {
  return h("a", {
    href: "#",
    class: "run-link",
    text: `run ${shortId(runId)}`,
    on: {
      click: (ev) => {
        ev.preventDefault();
        openRun(runId);
      },
    },
  });
}

function approvalItem(a) {
  const decides = can("approval.resolve", state.sessionOwners.get(a.session_id));
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
      a.session_id ? h("span", { text: `session ${shortId(a.session_id)}` }) : null,
      h("span", { text: a.principal }),
      h("span", { text: clock(a.requested_at_ms) }),
    ),
    decides ? approvalControls(a.approval_id, a, null) : null,
  );
}

// --- approval history -----------------------------------------------------------------------

function showApprovalsView(view) {
  state.view = view;
  for (const [name, tab] of [
    ["pending", $("tab-pending")],
    ["history", $("tab-history")],
    ["learning", $("tab-learning")],
  ]) {
    tab.setAttribute("aria-selected", String(view === name));
    tab.classList.toggle("active", view === name);
  }
  $("pending-view").hidden = view !== "pending";
  $("history-view").hidden = view !== "history";
  $("learning-view").hidden = view !== "learning";
  if (view === "history" && api.token) refreshHistory().catch(reportError);
  if (view === "learning" && api.token) refreshLearning().catch(reportError);
}

/**
 * Resolved approvals, most recently decided first. The API pages approvals by id (request
 * order), and an old request may be decided late, so every page is read; the newest
 * MAX_HISTORY decisions are shown. Polled only while the history tab is open.
 */
async function refreshHistory() {
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

function when(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString([], { hour12: false });
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

// --- learning -------------------------------------------------------------------------------

const LEARNING_EVERY_MS = 3000;
const LEARNING_PAGE = 200;
const MAX_LEARNING = 500;

/** The Learning tab, for principals that may list candidates; polled while it is open. */
function startLearning() {
  const reads = can("learning.list");
  $("tab-learning").hidden = !reads;
  if (!reads && state.view === "learning") showApprovalsView("pending");
  if (reads) every(LEARNING_EVERY_MS, () => (state.view === "learning" ? refreshLearning() : null));
}

/**
 * What post-run reflection proposed (facts, preferences, procedures), newest first, in the
 * status picked: kind, status, confidence, the text, and the runs that show it (each opens its
 * tape). Accept / reject / roll back only for principals that may review (learning.review).
 */
async function refreshLearning() {
  const status = $("learning-status").value;
  const all = [];
  let after;
  for (;;) {
    const { items, next } = page(
      await api.get(`/v1/learning/candidates${q({ status, after, limit: LEARNING_PAGE })}`),
    );
    all.push(...items);
    if (!next || items.length < LEARNING_PAGE || next === after || all.length >= MAX_LEARNING)
      break;
    after = next;
  }
  const shown = all.reverse().slice(0, MAX_LEARNING);
  reconcile($("learning-list"), shown, (c) => c.candidate_id, learningItem);
  $("learning-empty").hidden = shown.length > 0;
  $("learning-readonly").hidden = can("learning.review");
}

function learningItem(c) {
  const status = c.status.replace("_", " ");
  return h(
    "li",
    {
      class: `learning-item ${c.status}`,
      testid: "learning-item",
      data: { candidateId: c.candidate_id, status: c.status, kind: c.kind },
    },
    h(
      "div",
      { class: "head" },
      badge(c.kind, "kind"),
      badge(c.status, "status"),
      h("span", {
        class: "muted",
        testid: "learning-confidence",
        title: "confidence",
        text: `${(c.confidence_bps / 100).toFixed(1)}%`,
      }),
    ),
    h("div", { class: "detail learning-text", testid: "learning-text", text: c.text }),
    h(
      "div",
      { class: "item-meta" },
      h("span", { text: `about ${c.principal}` }),
      h("span", { text: plural(c.runs, "run") }),
      c.decided_by ? h("span", { testid: "learning-by", text: `${status} by ${c.decided_by}` }) : null,
      c.memory_item_id ? h("span", { class: "mono", text: `memory ${shortId(c.memory_item_id)}` }) : null,
    ),
    h(
      "div",
      { class: "item-meta evidence", testid: "learning-evidence" },
      h("span", { class: "muted", text: "evidence:" }),
      c.evidence.map((e) => {
        const link = runLink(e.run_id);
        link.title = e.positions.length ? `journal positions ${e.positions.join(", ")}` : "";
        return link;
      }),
    ),
    c.reason ? h("div", { class: "detail", text: `reason: ${c.reason}` }) : null,
    can("learning.review") ? learningControls(c) : null,
  );
}

function learningControls(c) {
  const reason = h("input", {
    type: "text",
    class: "reason",
    placeholder: "reason (optional)",
    "aria-label": "Reason",
    testid: "learning-reason",
  });
  const act = (decision, label, kind) =>
    h("button", {
      type: "button",
      class: `small ${kind}`,
      testid: `learning-${decision}`,
      text: label,
      on: { click: (ev) => reviewCandidate(c, decision, reason.value.trim(), ev.target) },
    });
  return h(
    "div",
    { class: "controls learning-controls" },
    c.status === "pending" || c.status === "applied" ? reason : null,
    c.status !== "applied" ? act("accept", "Accept", "primary") : null,
    c.status === "pending" ? act("reject", "Reject", "danger") : null,
    c.status === "applied" ? act("rollback", "Roll back", "danger") : null,
  );
}

async function reviewCandidate(c, decision, reason, button) {
  button.disabled = true;
  try {
    const after = await api.post(`/v1/learning/candidates/${enc(c.candidate_id)}/${decision}`, {
      reason,
    });
    toast(`${after.kind} ${after.status.replace("_", " ")} by ${after.decided_by}.`);
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
    await refreshLearning().catch(reportError);
  }
}

// --- postures -------------------------------------------------------------------------------

async function setPosture(ev) {
  ev.preventDefault();
  const sid = state.sessionId;
  const tool = $("posture-tool").value.trim();
  if (!sid) return;
  if (!tool) {
    toast("Name the tool whose posture to set.", "error");
    $("posture-tool").focus();
    return;
  }
  const posture = $("posture-value").value || null;
  try {
    await api.post(`/v1/sessions/${enc(sid)}/postures`, { tool, posture });
    const now = posture ?? "default posture";
    toast(`${tool} in this session: ${now} (set by ${state.me?.principal}).`);
    $("posture-tool").value = "";
  } catch (exc) {
    reportError(exc);
  }
}

// --- errors and wiring ----------------------------------------------------------------------

function reportError(exc) {
  if (exc instanceof ApiError && exc.status === 401) return; // the login screen says it
  toast(exc instanceof ApiError ? exc.message : `Unexpected error: ${exc}`, "error");
}

// --- incidents ------------------------------------------------------------------------------

/** The watchdog's open incidents as a banner: domain, subject (a run opens its tape), since. */
async function refreshIncidents() {
  const { items } = page(await api.get(`/v1/incidents${q({ state: "open", limit: 200 })}`));
  reconcile($("incidents-list"), items, (i) => i.incident_id, incidentItem);
  $("incidents-count").textContent = String(items.length);
  $("incidents").hidden = items.length === 0;
}

function incidentItem(i) {
  const since = i.evidence?.since_ms || i.opened_at_ms;
  const subject =
    i.domain === "run"
      ? runLink(i.subject)
      : h("span", { class: "mono", text: shortId(i.subject) });
  const measured = i.evidence?.measure
    ? `${i.evidence.measure.replaceAll("_", " ")} ${i.evidence.value} (limit ${i.evidence.limit})`
    : "";
  return h(
    "li",
    {
      testid: "incident",
      title: [measured, i.evidence?.detail].filter(Boolean).join(": "),
      data: { incidentId: i.incident_id, domain: i.domain },
    },
    h("span", { class: "domain", text: i.domain }),
    " ",
    subject,
    " ",
    h("span", { class: "muted", text: `since ${clock(since)} (${ago(since)})` }),
    i.action ? h("span", { class: "muted", text: ` · auto: ${i.action}` }) : null,
  );
}

function wire() {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) {
      $("login-error").textContent = "Enter a token.";
      return;
    }
    $("login-error").textContent = "";
    login(token);
  });
  $("logout").addEventListener("click", () => forget());
  $("new-session").addEventListener("click", () => createSession().catch(reportError));
  $("composer").addEventListener("submit", sendMessage);
  $("message-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("cancel-run").addEventListener("click", cancelRun);
  $("posture-form").addEventListener("submit", setPosture);
  $("tab-pending").addEventListener("click", () => showApprovalsView("pending"));
  $("tab-history").addEventListener("click", () => showApprovalsView("history"));
  $("tab-learning").addEventListener("click", () => showApprovalsView("learning"));
  $("learning-status").addEventListener("change", () => refreshLearning().catch(reportError));
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && api.token) refreshApprovals().catch(() => {});
  });
}

wire();
const notice = sessionStorage.getItem(NOTICE_KEY) ?? "";
sessionStorage.removeItem(NOTICE_KEY);
if (api.token) login(api.token);
else showLogin(notice);
