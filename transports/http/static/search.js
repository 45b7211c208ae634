// The search page: sessions (by label, key, owner, id) and runs (by id, principal, how they
// ended, answer) that hold the text, newest first (GET /v1/sessions?q and GET /v1/runs?q).

import { q } from "./api.js";
import { $ } from "./dom.js";
import { Pager, runCard, sessionCard, withSessionNames } from "./list.js";
import { can, state } from "./state.js";

let sessions;
let runs;

export const searchPage = {
  name: "search",
  every: 5000,
  may: () => can("session.list") || can("run.list"),

  wire(go) {
    sessions = new Pager({
      list: $("found-sessions"),
      empty: $("found-sessions-none"),
      more: $("found-sessions-more"),
      problem: $("search-problem"),
      key: (s) => s.session_id,
      render: (s) => {
        state.sessions.set(s.session_id, s);
        return sessionCard(s);
      },
    });
    runs = new Pager({
      list: $("found-runs"),
      empty: $("found-runs-none"),
      more: $("found-runs-more"),
      problem: $("search-problem"),
      key: (r) => r.run_id,
      render: runCard,
      decorate: withSessionNames,
    });
    $("search-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("search-input").value.trim();
      if (text) go("search", { q: text });
    });
  },

  enter(params) {
    const text = params.get("q") ?? "";
    $("search-input").value = text;
    $("search-text").textContent = text;
    $("search-results").hidden = !text;
    $("search-hint").hidden = Boolean(text);
    $("found-sessions-section").hidden = !can("session.list");
    $("found-runs-section").hidden = !can("run.list");
    if (!text) return Promise.resolve();
    const paths = (route) => (after, limit) =>
      `${route}${q({ q: text, order: "newest", after, limit })}`;
    return Promise.all([
      can("session.list") ? sessions.start([paths("/v1/sessions")]) : null,
      can("run.list") ? runs.start([paths("/v1/runs")]) : null,
    ]);
  },

  refresh() {
    return Promise.all([sessions.poll(), runs.poll()]);
  },
};
