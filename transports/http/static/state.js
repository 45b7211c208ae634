import { shortId } from "./dom.js";

// What the console holds for the logged-in principal. It lives as long as the document: Log
// out (and a token the node stops accepting) loads the page again, so nothing of one
// principal is left for the next (docs/console.md).

export const state = {
  me: null, // GET /v1/whoami: {principal, roles, token_id, may, may_own}
  view: "work", // the page shown (app.js PAGES)
  sessionId: null, // the work page's selected session
  runId: null, // ...and the run whose tape is open
  runSessionId: null, // the session of the open run (its owner decides run.cancel)
  runState: null,
  runStateFromTape: false, // whether the open run's tape has said its state yet
  tapeAbort: null,
  sessions: new Map(), // session_id -> SessionRecord (those read so far)
  approvals: new Map(), // approval_id -> queue <li>
  resolved: new Set(), // approval ids seen resolved (tape or queue)
  approvalsTab: "pending", // the approvals pane's tab: pending | history
  timers: [],
};

/** The owner (creator) of a session, when the console has read it. */
export function ownerOf(sessionId) {
  return state.sessions.get(sessionId)?.principal;
}

/**
 * Whether the logged-in principal may do `action` on something `owner` owns, per
 * GET /v1/whoami: `may` (what its roles grant on anything) or, when it owns the thing itself,
 * `may_own`. A hint for what to show: the node decides every request again (a 403 is shown).
 */
export function can(action, owner) {
  const me = state.me;
  if (!me) return false;
  if (me.may?.[action]) return true;
  return Boolean(owner && owner === me.principal && me.may_own?.[action]);
}

/** Whether the principal may do `action` somewhere (on what others own, or on its own). */
export function canSomewhere(action) {
  return can(action) || Boolean(state.me?.may_own?.[action]);
}

/** A session's name for people: its label, else its key, else its short id. */
export function sessionName(s, fallbackId = "") {
  if (!s) return shortId(fallbackId);
  return s.label || s.session_key || shortId(s.session_id);
}
