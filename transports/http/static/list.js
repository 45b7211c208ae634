// What the list pages share: a list read newest first, page by page ("Load more"), refreshed
// while it is shown; the cards of a run and of a session; a page's filter form.

import { ApiError, api, enc, page } from "./api.js";
import { badge, h, plural, reconcile, runLink, sessionLink, shortId, stamp, took } from "./dom.js";
import { sessionName, state } from "./state.js";

const LIMIT = 50;
const POLL_MAX = 200;
const ANSWER_CHARS = 240;

/**
 * A list of `sources` (each `(after, limit) => path` of a route that answers
 * `{items, next_after}`), merged and shown newest first (by `key`, a ULID). `decorate(items)`
 * may add what the cards show besides the records (a session's name) before they are drawn.
 */
export class Pager {
  constructor({ list, empty, more, problem, key, render, decorate }) {
    Object.assign(this, { list, empty, more, problem, key, render });
    this.decorate = decorate ?? (async (items) => items);
    this.sources = [];
    this.cursors = [];
    this.items = new Map();
    this.generation = 0;
    more.addEventListener("click", () => this.next().catch((exc) => this.fail(exc)));
  }

  /** Show the first page of `sources` (what was shown before goes). */
  start(sources) {
    this.sources = sources;
    this.generation += 1;
    this.items = new Map();
    this.cursors = sources.map(() => null);
    this.list.replaceChildren();
    this.empty.hidden = true;
    this.more.hidden = true;
    return this.read(true).catch((exc) => this.refused(exc));
  }

  /** The next page of every source that has one. */
  next() {
    return this.read(false);
  }

  /**
   * The first pages again, as many items as are shown (up to 200 a source): what changed.
   */
  async poll() {
    const shown = Math.max(LIMIT, Math.ceil(this.items.size / Math.max(1, this.sources.length)));
    if (!this.sources.length || shown > POLL_MAX) return;
    const generation = this.generation;
    let pages;
    try {
      pages = await Promise.all(this.sources.map((path) => api.get(path(undefined, shown))));
    } catch (exc) {
      this.refused(exc);
      return;
    }
    if (generation !== this.generation) return;
    this.items = new Map();
    this.cursors = pages.map((data) => {
      const { items, next } = page(data);
      for (const item of items) this.items.set(this.key(item), item);
      return next;
    });
    await this.draw(generation);
  }

  async read(first) {
    const generation = this.generation;
    const pages = await Promise.all(
      this.sources.map((path, i) =>
        first || this.cursors[i] ? api.get(path(first ? undefined : this.cursors[i], LIMIT)) : null,
      ),
    );
    if (generation !== this.generation) return;
    pages.forEach((data, i) => {
      if (data === null) return;
      const { items, next } = page(data);
      for (const item of items) this.items.set(this.key(item), item);
      this.cursors[i] = next;
    });
    await this.draw(generation);
  }

  async draw(generation) {
    const items = [...this.items.values()].sort((a, b) => (this.key(a) < this.key(b) ? 1 : -1));
    const shown = await this.decorate(items);
    if (generation !== this.generation) return;
    reconcile(this.list, shown, this.key, this.render);
    this.empty.hidden = shown.length > 0;
    this.more.hidden = !this.cursors.some(Boolean);
    this.problem.textContent = "";
  }

  fail(exc) {
    if (exc instanceof ApiError && exc.status === 401) return;
    this.problem.textContent = exc instanceof ApiError ? exc.message : String(exc);
  }

  /** Show a refusal of the page's own input (a 4xx naming the field) on the page; throw
   * anything else, for the node's status. */
  refused(exc) {
    if (!(exc instanceof ApiError && exc.status >= 400 && exc.status < 500)) throw exc;
    this.fail(exc);
  }
}

/** The sessions of `items` (by `session_id`) the console has not read yet, read now. */
export async function withSessionNames(items) {
  const missing = [...new Set(items.map((i) => i.session_id))].filter(
    (id) => id && !state.sessions.has(id),
  );
  await Promise.all(
    missing.slice(0, 50).map(
      (id) =>
        api
          .get(`/v1/sessions/${enc(id)}`)
          .then((s) => state.sessions.set(id, s))
          .catch(() => state.sessions.set(id, null)), // unreadable: shown by id
    ),
  );
  return items.map((i) => ({
    ...i,
    session_name: sessionName(state.sessions.get(i.session_id), i.session_id),
  }));
}

/** A run as a card: state, id, session, who, when, how long, and how it ended. */
export function runCard(r) {
  const ended = [];
  if (r.state === "failed")
    ended.push(
      h(
        "div",
        { class: "detail bad", testid: "run-failure" },
        r.termination_reason ?? "",
        r.message ? `: ${r.message}` : "",
      ),
    );
  else if (r.state === "cancelled")
    ended.push(
      h("div", {
        class: "detail",
        text: `cancelled${r.message ? ` by ${r.message}` : ""} (${r.termination_reason ?? ""})`,
      }),
    );
  else if (r.answer)
    ended.push(h("div", { class: "detail answer-excerpt", text: excerpt(r.answer) }));
  return h(
    "li",
    {
      class: `card run-card state-${r.state}`,
      testid: "run-row",
      data: { runId: r.run_id, state: r.state },
    },
    h(
      "div",
      { class: "head" },
      badge(r.state),
      runLink(r.run_id, `run ${shortId(r.run_id)}`),
      h("span", { class: "muted", text: "in" }),
      sessionLink(r.session_id, r.session_name ?? shortId(r.session_id)),
      h("span", { class: "who", testid: "run-principal", text: r.principal }),
      stamp(r.accepted_at_ms),
    ),
    h(
      "div",
      { class: "item-meta" },
      r.ended_at_ms ? h("span", { text: `took ${took(r.accepted_at_ms, r.ended_at_ms)}` }) : null,
      h("span", { text: plural(r.turns, "turn") }),
      h("span", { text: plural(r.tool_calls, "tool call") }),
      h("span", { text: `${r.prompt_tokens} in / ${r.completion_tokens} out tokens` }),
    ),
    ended,
  );
}

/** A session as a card: its name, owner, key, runs and when it was last active. */
export function sessionCard(s) {
  return h(
    "li",
    { class: "card", testid: "session-row", data: { sessionId: s.session_id } },
    h(
      "div",
      { class: "head" },
      sessionLink(s.session_id, sessionName(s)),
      h("span", { class: "who", text: s.principal }),
      s.session_key ? h("span", { class: "mono muted", text: s.session_key }) : null,
    ),
    h(
      "div",
      { class: "item-meta" },
      h("span", { text: plural(s.runs, "run") }),
      h("span", { class: "mono", text: shortId(s.session_id), title: s.session_id }),
      h("span", {}, "active ", stamp(s.updated_at_ms)),
    ),
  );
}

function excerpt(text) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > ANSWER_CHARS ? `${line.slice(0, ANSWER_CHARS)}…` : line;
}

/** The values of a filter form's named fields (blank ones left out). */
export function formValues(form) {
  const out = {};
  for (const [k, v] of new FormData(form)) if (String(v).trim()) out[k] = String(v).trim();
  return out;
}

/** Fill a filter form's named fields from `params` (a URLSearchParams). */
export function fillForm(form, params) {
  for (const field of form.elements) {
    if (!field.name) continue;
    field.value = params.get(field.name) ?? "";
  }
}
