// The learning page: what post-run reflection proposed (GET /v1/learning/candidates;
// docs/learning.md), by status and kind; accept, reject and roll back for principals that may
// review (learning.review).

import { api, enc, page, q } from "./api.js";
import { $, badge, h, plural, reconcile, reportError, runLink, shortId, toast } from "./dom.js";
import { can } from "./state.js";

const LEARNING_PAGE = 200;
const MAX_LEARNING = 500;

export const learningPage = {
  name: "learning",
  every: 3000,
  may: () => can("learning.list"),

  wire() {
    $("learning-status").addEventListener("change", () => refreshLearning().catch(reportError));
    $("learning-kind").addEventListener("change", () => refreshLearning().catch(reportError));
  },

  enter() {
    return refreshLearning();
  },

  refresh() {
    return refreshLearning();
  },
};

/**
 * What post-run reflection proposed (facts, preferences, procedures), newest first, in the
 * status picked: kind, status, confidence, the text, and the runs that show it (each opens its
 * tape). Accept / reject / roll back only for principals that may review (learning.review).
 */
async function refreshLearning() {
  const status = $("learning-status").value;
  const kind = $("learning-kind").value;
  const all = [];
  let after;
  for (;;) {
    const { items, next } = page(
      await api.get(`/v1/learning/candidates${q({ status, kind, after, limit: LEARNING_PAGE })}`),
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
      class: `card learning-item ${c.status}`,
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
      c.decided_by
        ? h("span", { testid: "learning-by", text: `${status} by ${c.decided_by}` })
        : null,
      c.memory_item_id
        ? h("span", { class: "mono", text: `memory ${shortId(c.memory_item_id)}` })
        : null,
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
