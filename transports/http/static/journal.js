// The journal page (journal.read): the head of the hash chain and how far the views are
// behind it (GET /v1/journal/head), the signed checkpoints with the witness's status
// (GET /v1/journal/checkpoints), and a verification on demand (POST /v1/journal/verify).

import { api, q } from "./api.js";
import { $, badge, h, pairs, reconcile, reportError, stamp } from "./dom.js";
import { can } from "./state.js";

const SHOWN_CHECKPOINTS = 20;
const MAX_CHECKPOINTS = 5000;

export const journalPage = {
  name: "journal",
  every: 5000,
  may: () => can("journal.read"),

  wire() {
    $("verify-journal").addEventListener("click", verifyJournal);
  },

  enter() {
    return this.refresh();
  },

  async refresh() {
    const head = await api.get("/v1/journal/head");
    $("journal-head").replaceChildren(
      ...pairs([
        ["position", h("span", { testid: "head-position", text: head.position })],
        ["hash", h("span", { class: "mono hash", text: head.hash })],
        ["views at", head.views_position],
        ["views behind", head.position - head.views_position],
      ]).children,
    );
    // The route pages oldest first; the newest are what an operator looks at. Every page says
    // who signs and how the witness is doing.
    const all = [];
    let data;
    let after;
    do {
      data = await api.get(`/v1/journal/checkpoints${q({ after, limit: 200 })}`);
      all.push(...data.items);
      after = data.next_after;
    } while (after !== null && all.length < MAX_CHECKPOINTS);
    renderWitness(data.origin, data.witness, all.length);
    const newest = all.slice(-SHOWN_CHECKPOINTS).reverse();
    reconcile($("journal-checkpoints"), newest, (c) => String(c.position), checkpointCard);
    $("journal-checkpoints-none").hidden = all.length > 0;
  },

  leave() {
    $("verify-report").replaceChildren();
  },
};

function renderWitness(origin, witness, count) {
  $("journal-signing").replaceChildren(
    ...pairs([
      ["signed as", origin ?? "nothing is signed"],
      ["checkpoints", count],
      ["witness", witness ? witness.path : "none configured"],
      ["appended", witness ? witness.appended : ""],
      [
        "failures",
        witness ? h("span", { testid: "witness-failures", text: witness.failures }) : "",
      ],
      ["pending", witness ? witness.pending : ""],
      ["last error", witness?.last_error ?? ""],
    ]).children,
  );
}

function checkpointCard(c) {
  return h(
    "li",
    { class: "card", testid: "journal-checkpoint", data: { position: c.position } },
    h(
      "div",
      { class: "head" },
      h("span", { text: `up to position ${c.position}` }),
      stamp(c.signed_at_ms),
      h("span", { class: "mono muted hash", text: c.hash }),
    ),
    h(
      "details",
      {},
      h("summary", { text: "Signed note" }),
      h("pre", { class: "args", text: c.note }),
    ),
  );
}

async function verifyJournal() {
  const button = $("verify-journal");
  const out = $("verify-report");
  button.disabled = true;
  out.replaceChildren(h("p", { class: "muted", text: "Verifying every row…" }));
  try {
    const r = await api.post("/v1/journal/verify", {});
    out.replaceChildren(
      h(
        "div",
        {
          class: `card verify-${r.ok ? "ok" : "bad"}`,
          testid: "verify-result",
          data: { ok: r.ok },
        },
        h(
          "div",
          { class: "head" },
          badge(r.ok ? "ok" : "failed"),
          h("span", { text: r.ok ? "The journal verifies." : "The journal does not verify." }),
        ),
        pairs([
          ["rows", r.events],
          ["head", r.head_position],
          ["checkpoints", r.checkpoints],
          [
            "signatures checked with",
            r.key_source === "node" ? "the node's own key" : r.key_source,
          ],
          ["anchor", r.anchor],
          ["rows after the last checkpoint", r.unsigned_rows],
          ["witness checkpoints", r.witness_checkpoints ?? ""],
          ["took", `${r.elapsed_s.toFixed(2)} s`],
          ["fault", r.fault ? `${r.fault.kind} at ${r.fault.position}: ${r.fault.message}` : ""],
        ]),
      ),
    );
  } catch (exc) {
    out.replaceChildren();
    reportError(exc);
  } finally {
    button.disabled = false;
  }
}
