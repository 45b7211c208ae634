// What the watchdog found (GET /v1/incidents, incident.read): the open ones as a banner on every
// page, and the incidents page with every incident, open or resolved, by domain.

import { api, page, q, readAll } from "./api.js";
import { $, ago, badge, clock, h, pairs, reconcile, runLink, shortId, stamp, when } from "./dom.js";
import { fillForm, formValues } from "./list.js";
import { can } from "./state.js";

const MAX_INCIDENTS = 500;

/** The open incidents as a banner: domain, subject (a run opens its tape), since when. */
export async function refreshIncidentBanner() {
  const { items } = page(await api.get(`/v1/incidents${q({ state: "open", limit: 200 })}`));
  reconcile($("incidents-list"), items, (i) => i.incident_id, bannerItem);
  $("incidents-count").textContent = String(items.length);
  $("incidents").hidden = items.length === 0;
}

function bannerItem(i) {
  const since = i.evidence?.since_ms || i.opened_at_ms;
  return h(
    "li",
    {
      testid: "incident",
      title: [measured(i), i.evidence?.detail].filter(Boolean).join(": "),
      data: { incidentId: i.incident_id, domain: i.domain },
    },
    h("span", { class: "domain", text: i.domain }),
    " ",
    subject(i),
    " ",
    h("span", { class: "muted", text: `since ${clock(since)} (${ago(since)})` }),
    i.action ? h("span", { class: "muted", text: ` · auto: ${i.action}` }) : null,
  );
}

function subject(i) {
  return i.domain === "run"
    ? runLink(i.subject)
    : h("span", { class: "mono", text: shortId(i.subject), title: i.subject });
}

function measured(i) {
  const e = i.evidence ?? {};
  return e.measure
    ? `${e.measure.replaceAll("_", " ")} ${e.value}${e.unit ? ` ${e.unit}` : ""} (limit ${e.limit})`
    : "";
}

export const incidentsPage = {
  name: "incidents",
  every: 3000,
  may: () => can("incident.read"),
  params: new URLSearchParams(),

  wire(go) {
    const form = $("incidents-filter");
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      go("incidents", formValues(form));
    });
    form.addEventListener("change", () => form.requestSubmit());
  },

  enter(params) {
    this.params = params;
    fillForm($("incidents-filter"), params);
    return this.refresh().catch((exc) => ($("incidents-problem").textContent = exc.message));
  },

  /** Every incident of the filter (up to 500), the newest first. */
  async refresh() {
    const filters = {
      state: this.params.get("state") ?? undefined,
      domain: this.params.get("domain") ?? undefined,
    };
    const all = await readAll(
      (after) => `/v1/incidents${q({ ...filters, after, limit: 200 })}`,
      MAX_INCIDENTS,
    );
    all.reverse();
    reconcile($("incidents-table"), all, (i) => i.incident_id, incidentCard);
    $("incidents-none").hidden = all.length > 0;
    $("incidents-problem").textContent = "";
  },
};

function incidentCard(i) {
  const e = i.evidence ?? {};
  return h(
    "li",
    {
      class: `card incident-${i.state}`,
      testid: "incident-row",
      data: { incidentId: i.incident_id, domain: i.domain, state: i.state },
    },
    h(
      "div",
      { class: "head" },
      badge(i.state),
      h("span", { class: "domain", text: i.domain }),
      subject(i),
      stamp(i.opened_at_ms),
    ),
    pairs([
      ["measured", measured(i)],
      ["since", e.since_ms ? when(e.since_ms) : ""],
      ["detail", e.detail],
      ["action", i.action],
      ["resolved", i.resolved_at_ms ? `${when(i.resolved_at_ms)} (${i.how ?? ""})` : ""],
    ]),
  );
}
