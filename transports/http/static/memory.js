// The memory page: what runs are shown again (docs/memory.md). A search scores the items the
// principal may read as a run of it would see them (GET /v1/memory?q&k&session_id); without
// one, every item it may read, newest first (GET /v1/memory). Write (memory.write) and delete
// (memory.delete, with a reason) where the principal may.

import { ApiError, api, enc, q, readAll } from "./api.js";
import {
  $,
  badge,
  h,
  pairs,
  reconcile,
  reportError,
  sessionLink,
  shortId,
  stamp,
  toast,
} from "./dom.js";
import { formValues } from "./list.js";
import { can, canSomewhere, ownerOf } from "./state.js";

const MAX_ITEMS = 1000;

export const memoryPage = {
  name: "memory",
  every: 5000,
  may: () => can("memory.list"),
  params: new URLSearchParams(),

  wire() {
    // The query stays out of the address (and so out of the browser's history), as the API
    // keeps it out of its answer.
    const form = $("memory-search");
    const search = (values) => {
      this.params = new URLSearchParams(values);
      this.refresh().catch((exc) => ($("memory-problem").textContent = exc.message));
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      search(formValues(form));
    });
    form.addEventListener("reset", () => search({}));
    $("memory-write").addEventListener("submit", writeItem);
    $("memory-scope").addEventListener("change", () => {
      $("memory-session-field").hidden = $("memory-scope").value !== "session";
    });
  },

  enter() {
    $("memory-write").hidden = !canSomewhere("memory.write");
    return this.refresh().catch((exc) => ($("memory-problem").textContent = exc.message));
  },

  async refresh() {
    const text = this.params.get("q");
    let items;
    if (text) {
      const found = await api.get(
        `/v1/memory${q({ q: text, k: this.params.get("k") ?? 10, session_id: this.params.get("session_id") ?? undefined })}`,
      );
      items = (found.hits ?? []).map((hit) => ({ ...hit.item, score: hit }));
      $("memory-heading").textContent = `Best ${items.length} for “${text}”`;
    } else {
      items = (
        await readAll((after) => `/v1/memory${q({ after, limit: 200 })}`, MAX_ITEMS)
      ).reverse();
      $("memory-heading").textContent = "Every item, newest first";
    }
    reconcile($("memory-list"), items, (m) => m.item_id, memoryCard);
    $("memory-none").hidden = items.length > 0;
    $("memory-problem").textContent = "";
  },
};

/** Whose item it is, as the policy reads it (transports/access.py memory_scope). */
function ownerOfItem(m) {
  if (m.scope === "session") return ownerOf(m.session_id);
  if (m.scope === "principal") return m.principal ?? m.written_by;
  return m.written_by;
}

function memoryCard(m) {
  const score = m.score;
  return h(
    "li",
    { class: "card", testid: "memory-item", data: { itemId: m.item_id, scope: m.scope } },
    h(
      "div",
      { class: "head" },
      badge(m.scope, "scope"),
      m.scope === "principal" ? h("span", { class: "who", text: m.principal }) : null,
      m.scope === "session" ? sessionLink(m.session_id) : null,
      h("span", { class: "mono muted", text: shortId(m.item_id), title: m.item_id }),
      stamp(m.updated_at_ms),
    ),
    h("div", { class: "detail memory-text", testid: "memory-text", text: m.text }),
    pairs([
      ["tags", m.tags.join(", ")],
      ["written by", m.written_by],
      ["source", m.source],
      ["expires", m.expires_at_ms ? stamp(m.expires_at_ms) : ""],
      [
        "score",
        score
          ? `${score.final.toFixed(2)} (lexical ${score.lexical.toFixed(2)}, vector ${score.vector.toFixed(2)}, recency ${score.recency.toFixed(2)})`
          : "",
      ],
    ]),
    can("memory.delete", ownerOfItem(m)) ? deleteControls(m) : null,
  );
}

function deleteControls(m) {
  const reason = h("input", {
    type: "text",
    class: "reason",
    placeholder: "reason (recorded)",
    "aria-label": "Why delete this item",
    testid: "memory-delete-reason",
  });
  const button = h("button", {
    type: "button",
    class: "small danger",
    testid: "memory-delete",
    text: "Delete",
    on: { click: () => deleteItem(m, reason.value.trim(), button) },
  });
  return h("div", { class: "controls" }, reason, button);
}

async function deleteItem(m, reason, button) {
  button.disabled = true;
  try {
    const done = await api.delete(`/v1/memory/${enc(m.item_id)}${q({ reason })}`);
    toast(`Deleted by ${done.item.deleted_by}.`);
  } catch (exc) {
    reportError(exc);
    button.disabled = false;
  } finally {
    memoryPage.refresh().catch(() => {});
  }
}

async function writeItem(ev) {
  ev.preventDefault();
  const form = ev.target;
  const text = $("memory-text").value.trim();
  const problem = $("memory-write-problem");
  problem.textContent = "";
  if (!text) {
    problem.textContent = "Write the text to remember.";
    $("memory-text").focus();
    return;
  }
  const scope = $("memory-scope").value;
  const body = {
    text,
    scope,
    tags: $("memory-tags")
      .value.split(",")
      .map((t) => t.trim())
      .filter(Boolean),
  };
  if (scope === "session") body.session_id = $("memory-session").value.trim();
  try {
    const written = await api.post("/v1/memory", body);
    toast(`Remembered (${written.item.scope}) as ${written.item.written_by}.`);
    form.reset();
    $("memory-session-field").hidden = true;
  } catch (exc) {
    if (exc instanceof ApiError && exc.status !== 401) problem.textContent = exc.message;
    else reportError(exc);
  } finally {
    memoryPage.refresh().catch(() => {});
  }
}
