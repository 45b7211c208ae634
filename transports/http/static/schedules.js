// The schedules page: every schedule with when it fires, as whom, into which session, its
// status and next due time (GET /v1/schedules, schedule.list), and Pause / Resume / Run now /
// Delete for principals that may manage it (POST /v1/schedules/{name}/pause|resume|run,
// DELETE /v1/schedules/{name}: schedule.manage). docs/schedules.md.

import { api, enc } from "./api.js";
import { $, badge, h, pairs, reconcile, reportError, stamp, toast } from "./dom.js";
import { can } from "./state.js";

export const schedulesPage = {
  name: "schedules",
  every: 3000,
  may: () => can("schedule.list"),

  wire() {},

  enter() {
    return this.refresh();
  },

  leave() {},

  async refresh() {
    const { items } = await api.get("/v1/schedules");
    reconcile($("schedules-list"), items, (s) => s.schedule_id, scheduleCard);
    $("schedules-none").hidden = items.length > 0;
  },
};

function when(s) {
  return s.cron ? `${s.cron} (${s.tz})` : `every ${s.every_ms / 1000} s`;
}

function scheduleCard(s) {
  const manages = can("schedule.manage", s.runs_as);
  const button = (text, testid, action, danger = false) =>
    h("button", {
      type: "button",
      class: danger ? "small danger" : "small",
      testid,
      text,
      on: { click: (ev) => act(s, action, ev.target) },
    });
  return h(
    "li",
    { class: "card", testid: "schedule-row", data: { name: s.name, status: s.status } },
    h(
      "div",
      { class: "head" },
      badge(s.status),
      h("span", { class: "tool-name", text: s.name }),
      h("span", { class: "mono", text: when(s) }),
      h("span", { class: "who", text: s.runs_as }),
    ),
    pairs([
      ["session", s.session_key],
      ["next", s.next_due_ms ? stamp(s.next_due_ms) : "-"],
      ["fired", s.fired],
      ["skipped", s.skipped || ""],
      ["catch-up", s.catch_up],
      ["overlap", s.overlap],
      ["stopped", s.stopped ?? ""],
      ["last run", s.last_run_id ?? ""],
    ]),
    h("pre", { class: "args", text: s.text }),
    manages && s.status === "active" ? button("Pause", "schedule-pause", "pause") : null,
    manages && s.status === "paused" ? button("Resume", "schedule-resume", "resume") : null,
    manages && s.status !== "stopped" ? button("Run now", "schedule-run", "run") : null,
    manages ? button("Delete", "schedule-delete", "delete", true) : null,
  );
}

async function act(s, action, target) {
  target.disabled = true;
  try {
    const path = `/v1/schedules/${enc(s.name)}`;
    if (action === "delete") await api.delete(path);
    else {
      const done = await api.post(`${path}/${action}`, {});
      if (action === "run") toast(`Schedule ${s.name} fired run ${done.run_id}.`);
    }
  } catch (exc) {
    reportError(exc);
  } finally {
    target.disabled = false;
    schedulesPage.refresh().catch(reportError);
  }
}
