// The runs page: every run the principal may read, by state (live, waiting for approval,
// failed, done, cancelled, all), newest first, narrowed by who it acts for, its session and
// text (GET /v1/runs?state&principal&session_id&q&order=newest).

import { q } from "./api.js";
import { $ } from "./dom.js";
import { Pager, fillForm, formValues, runCard, withSessionNames } from "./list.js";
import { can } from "./state.js";

/** Each tab of the page and the run states it lists. */
const TABS = {
  live: ["in_progress", "accepted"],
  awaiting_approval: ["awaiting_approval"],
  failed: ["failed"],
  done: ["done"],
  cancelled: ["cancelled"],
  all: [undefined],
};

let pager;

export const runsPage = {
  name: "runs",
  every: 3000,
  may: () => can("run.list"),

  wire(go) {
    pager = new Pager({
      list: $("runs-table"),
      empty: $("runs-none"),
      more: $("runs-more"),
      problem: $("runs-problem"),
      key: (r) => r.run_id,
      render: runCard,
      decorate: withSessionNames,
    });
    const form = $("runs-filter");
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      go("runs", { tab: $("runs-tabs").dataset.tab, ...formValues(form) });
    });
    form.addEventListener("reset", () => go("runs", { tab: $("runs-tabs").dataset.tab }));
    for (const tab of $("runs-tabs").querySelectorAll("[data-tab]"))
      tab.addEventListener("click", () =>
        go("runs", { ...formValues(form), tab: tab.dataset.tab }),
      );
  },

  enter(params) {
    const tab = TABS[params.get("tab")] ? params.get("tab") : "live";
    const tabs = $("runs-tabs");
    tabs.dataset.tab = tab;
    for (const button of tabs.querySelectorAll("[data-tab]")) {
      const on = button.dataset.tab === tab;
      button.classList.toggle("active", on);
      button.setAttribute("aria-pressed", String(on));
    }
    fillForm($("runs-filter"), params);
    const filters = {
      principal: params.get("principal") ?? undefined,
      session_id: params.get("session_id") ?? undefined,
      q: params.get("q") ?? undefined,
      order: "newest",
    };
    return pager.start(
      TABS[tab].map(
        (state) => (after, limit) => `/v1/runs${q({ ...filters, state, after, limit })}`,
      ),
    );
  },

  refresh() {
    return pager.poll();
  },
};
