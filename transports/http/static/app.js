// reel web console: plain ES modules, no build step, no third-party code (docs/console.md).
//
// This module logs in and out, shows one page at a time (the address's #view=...), keeps each
// shown page fresh, and says how the node is (connected, draining, unreachable). Every datum
// comes from the HTTP API with the logged-in token (api.js); everything from the node reaches
// the page as text (dom.js).

import { ApiError, TOKEN_KEY, api, health } from "./api.js";
import { refreshApprovals, refreshHistory, showApprovalsTab } from "./approvals.js";
import { channelsPage } from "./channels.js";
import { mcpPage } from "./mcp.js";
import { $, reportError } from "./dom.js";
import { incidentsPage, refreshIncidentBanner } from "./incidents.js";
import { journalPage } from "./journal.js";
import { learningPage } from "./learning.js";
import { memoryPage } from "./memory.js";
import { runsPage } from "./runs.js";
import { schedulesPage } from "./schedules.js";
import { searchPage } from "./search.js";
import { can, state } from "./state.js";
import { cancelRun, openRun, renderNoRun } from "./tape.js";
import { tasksPage } from "./tasks.js";
import { tokensPage } from "./tokens.js";
import { usagePage } from "./usage.js";
import {
  applyWorkPermissions,
  refreshSession,
  refreshSessions,
  renderSessionHead,
  selectSession,
  wireWork,
  writeRoute,
} from "./work.js";

const NOTICE_KEY = "reel.notice";
const APPROVALS_EVERY_MS = 1000;
const SESSIONS_EVERY_MS = 3000;
const SESSION_EVERY_MS = 5000;
const HISTORY_EVERY_MS = 5000;
const INCIDENTS_EVERY_MS = 3000;
const HEALTH_EVERY_MS = 3000;

/** The sessions page: the work bench (sessions, a session, a run's tape, approvals). */
const workPage = {
  name: "work",
  may: () => true,
  wire() {},
  /** The address names what is open: a session (and no run), a run (and its session), or
   * nothing (back from another page: what was open stays, and the address says so). */
  enter(params) {
    const session = params.get("session");
    const run = params.get("run");
    if (session && !run) renderNoRun();
    if (session && session !== state.sessionId) selectSession(session);
    if (run && run !== state.runId) openRun(run);
    writeRoute();
    return refreshSessions();
  },
  refresh() {
    return refreshSessions();
  },
};

const PAGES = [
  workPage,
  runsPage,
  searchPage,
  tasksPage,
  incidentsPage,
  usagePage,
  memoryPage,
  learningPage,
  channelsPage,
  mcpPage,
  schedulesPage,
  tokensPage,
  journalPage,
];
const BY_NAME = new Map(PAGES.map((p) => [p.name, p]));

// --- how the node is ------------------------------------------------------------------------

const node = { health: "ok", problem: "", version: "" };

/** Connected, draining (the node is shutting down: /healthz says so), node unreachable, or an
 * API error (the last poll's message on hover). */
function renderNodeStatus() {
  const status = $("node-status");
  status.hidden = false;
  let text = "connected";
  let title = node.version ? `reel ${node.version}` : "";
  let kind = "up";
  if (node.health === "unreachable") {
    text = "node unreachable";
    kind = "down";
  } else if (node.health === "draining") {
    text = "draining";
    title = "The node is shutting down: live runs may finish, new sessions and runs are refused.";
    kind = "draining";
  } else if (node.problem) {
    text = "API error";
    title = node.problem;
    kind = "down";
  }
  status.textContent = text;
  status.title = title;
  status.className = `node-status ${kind}`;
  status.dataset.state = kind;
}

/** A poll's outcome: what it says of the node. */
function polled(exc) {
  if (!exc) {
    node.problem = "";
    if (node.health === "unreachable") node.health = "ok";
  } else if (exc instanceof ApiError && exc.status === 0) {
    node.health = "unreachable";
  } else if (exc instanceof ApiError && exc.status !== 401) {
    node.problem = exc.message;
  }
  renderNodeStatus();
}

/** Ask /healthz every few seconds (no token: it answers while a drain refuses new work). */
function watchHealth() {
  const tick = async () => {
    if (document.hidden) return;
    const said = await health();
    node.health = said.status;
    node.version = said.version || node.version;
    renderNodeStatus();
  };
  state.timers.push(setInterval(tick, HEALTH_EVERY_MS));
  tick();
}

// --- polling --------------------------------------------------------------------------------

/** Run `fn` every `ms` while the tab is visible and `when()` holds (and once now, unless
 * `later`: a page's first read is its enter()). */
function every(ms, fn, when = () => true, later = false) {
  let busy = false;
  const tick = async () => {
    if (busy || document.hidden || !api.token || !when()) return;
    busy = true;
    try {
      await fn();
      polled(null);
    } catch (exc) {
      polled(exc);
    } finally {
      busy = false;
    }
  };
  state.timers.push(setInterval(tick, ms));
  if (!later) tick();
}

// --- pages ----------------------------------------------------------------------------------

/** Go to `view` with `params` (its filters): the address changes, route() shows it. */
function go(view, params = {}) {
  const usp = new URLSearchParams();
  if (view !== "work") usp.set("view", view);
  for (const [k, v] of Object.entries(params)) if (v) usp.set(k, v);
  location.hash = usp.toString();
}

/** Show the page the address names (the sessions page when it names none, or one the
 * principal may not see). */
function route() {
  if (!state.me) return;
  const params = new URLSearchParams(location.hash.slice(1));
  let target = BY_NAME.get(params.get("view") ?? "work") ?? workPage;
  if (!target.may()) target = workPage;
  const previous = BY_NAME.get(state.view);
  if (previous !== target) previous?.leave?.();
  state.view = target.name;
  for (const p of PAGES) $(`page-${p.name}`).hidden = p !== target;
  for (const link of document.querySelectorAll("#nav a[data-view]")) {
    if (link.dataset.view === target.name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.body.dataset.view = target.name;
  target
    .enter(params)
    ?.then(() => polled(null))
    .catch((exc) => {
      polled(exc);
      reportError(exc);
    });
  if (previous && previous !== target) focusPage();
}

/** Put the focus on the shown page's heading (where a screen reader starts reading it). */
function focusPage() {
  $(`page-${state.view}`).querySelector("h1, h2")?.focus();
}

// --- login ----------------------------------------------------------------------------------

function showLogin(message = "") {
  $("app-view").hidden = true;
  $("nav").hidden = true;
  $("search-form").hidden = true;
  $("logout").hidden = true;
  $("node-status").hidden = true;
  $("whoami").hidden = true;
  $("incidents").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message;
  $("token-input").value = "";
  $("token-input").focus();
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
 * Forget the token and everything shown with it: the page is loaded again, so no control,
 * list, decision or open run of this principal is left for whoever logs in next in this tab.
 * `notice` is said on the login form of the new page.
 */
function forget(notice = "") {
  api.token = "";
  state.me = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (notice) sessionStorage.setItem(NOTICE_KEY, notice);
  for (const timer of state.timers) clearInterval(timer);
  state.tapeAbort?.abort();
  location.replace(location.pathname);
}

function renderWhoami() {
  const me = state.me;
  $("whoami").hidden = false;
  $("whoami-principal").textContent = me.principal;
  $("whoami-roles").textContent = (me.roles ?? []).join(", ");
  $("whoami").title = me.token_id ? `token ${me.token_id}` : "the node's admin.token";
}

function start() {
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  $("nav").hidden = false;
  $("logout").hidden = false;
  renderWhoami();
  for (const link of document.querySelectorAll("#nav a[data-view]"))
    link.hidden = !BY_NAME.get(link.dataset.view).may();
  $("search-form").hidden = !searchPage.may();
  showApprovalsTab(state.approvalsTab);
  renderSessionHead();
  applyWorkPermissions();
  renderNodeStatus();
  route();
  const on = (name) => () => state.view === name;
  watchHealth();
  every(APPROVALS_EVERY_MS, refreshApprovals);
  every(SESSIONS_EVERY_MS, refreshSessions, on("work"));
  every(SESSION_EVERY_MS, refreshSession, () => state.view === "work" && state.sessionId);
  every(
    HISTORY_EVERY_MS,
    refreshHistory,
    () => state.view === "work" && state.approvalsTab === "history",
  );
  if (can("incident.read")) every(INCIDENTS_EVERY_MS, refreshIncidentBanner);
  for (const p of PAGES) if (p.every) every(p.every, () => p.refresh(), on(p.name), true);
}

// --- wiring ---------------------------------------------------------------------------------

function wire() {
  // While logged in, a refused token (revoked, expired, the node's changed) ends the login;
  // while logging in, login() says so itself.
  api.onUnauthorized = () => {
    if (state.me)
      forget(
        "The token was not accepted (expired, revoked, or the node's token changed). Log in again.",
      );
  };
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
  $("skip-link").addEventListener("click", (ev) => {
    ev.preventDefault(); // the address names pages: a #fragment would change the page
    focusPage();
  });
  $("cancel-run").addEventListener("click", cancelRun);
  for (const [name, tab] of [
    ["pending", $("tab-pending")],
    ["history", $("tab-history")],
  ]) {
    tab.addEventListener("click", () => showApprovalsTab(name));
    tab.addEventListener("keydown", (ev) => {
      if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
      const other = name === "pending" ? "history" : "pending";
      showApprovalsTab(other);
      $(`tab-${other}`).focus();
    });
  }
  wireWork();
  for (const p of PAGES) p.wire(go);
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && api.token) refreshApprovals().catch(() => {});
  });
}

wire();
const notice = sessionStorage.getItem(NOTICE_KEY) ?? "";
sessionStorage.removeItem(NOTICE_KEY);
if (api.token) login(api.token);
else showLogin(notice);
