// Tokens, turns and cost (GET /v1/usage, usage.read): one row per principal, session or model
// over UTC days, and the total. A principal that may read only its own usage sees only its own.

import { api, q } from "./api.js";
import { $, h, reconcile } from "./dom.js";
import { fillForm, formValues } from "./list.js";
import { canSomewhere } from "./state.js";

export const usagePage = {
  name: "usage",
  every: 5000,
  may: () => canSomewhere("usage.read"),
  params: new URLSearchParams(),

  wire(go) {
    const form = $("usage-filter");
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      go("usage", formValues(form));
    });
    form.addEventListener("change", () => form.requestSubmit());
  },

  enter(params) {
    this.params = params;
    fillForm($("usage-filter"), params);
    return this.refresh().catch((exc) => ($("usage-problem").textContent = exc.message));
  },

  async refresh() {
    const query = {
      by: this.params.get("by") || undefined,
      from: this.params.get("from") || undefined,
      to: this.params.get("to") || undefined,
    };
    const report = await api.get(`/v1/usage${q(query)}`);
    $("usage-span").textContent = `by ${report.by}, ${report.from} to ${report.to} (UTC)`;
    reconcile($("usage-table"), [...report.rows, report.total], (r) => r.key, usageRow);
    $("usage-none").hidden = report.rows.length > 0;
    $("usage-problem").textContent = "";
  },
};

function usageRow(r) {
  const cost = r.cost === null ? "-" : String(Number(r.cost.toPrecision(6)));
  return h(
    "li",
    { class: r.key === "total" ? "card total" : "card", testid: "usage-row", data: { key: r.key } },
    h("span", { class: "mono", text: r.key }),
    h("span", {
      text: ` ${r.tokens} tokens (in ${r.input_tokens}, cached ${r.cached_tokens}, out ${r.output_tokens}) · ${r.turns} turns · cost ${cost}`,
    }),
    r.unpriced.length ? h("span", { class: "muted", text: ` · no price: ${r.unpriced.join(", ")}` }) : null,
  );
}
