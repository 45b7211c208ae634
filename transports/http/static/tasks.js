// The tasks page: the node's background tasks, newest first, by state and kind
// (GET /v1/tasks?state&kind&order=newest), each with its attempts, worker, error and result;
// Cancel for a task that has not ended (POST /v1/tasks/{id}/cancel, task.cancel).

import { ApiError, api, enc, q } from "./api.js";
import { $, badge, h, pairs, pretty, reportError, shortId, stamp, toast, took } from "./dom.js";
import { Pager, fillForm, formValues } from "./list.js";
import { can } from "./state.js";

const ENDED = new Set(["succeeded", "failed", "expired", "cancelled"]);

let pager;

export const tasksPage = {
  name: "tasks",
  every: 3000,
  may: () => can("task.list"),

  wire(go) {
    pager = new Pager({
      list: $("tasks-list"),
      empty: $("tasks-none"),
      more: $("tasks-more"),
      problem: $("tasks-problem"),
      key: (t) => t.task_id,
      render: taskCard,
    });
    const form = $("tasks-filter");
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      go("tasks", formValues(form));
    });
    form.addEventListener("change", () => form.requestSubmit());
  },

  enter(params) {
    fillForm($("tasks-filter"), params);
    const filters = {
      state: params.get("state") ?? undefined,
      kind: params.get("kind") ?? undefined,
      order: "newest",
    };
    return pager.start([(after, limit) => `/v1/tasks${q({ ...filters, after, limit })}`]);
  },

  refresh() {
    return pager.poll();
  },
};

function taskCard(t) {
  const cancels = !ENDED.has(t.state) && can("task.cancel");
  return h(
    "li",
    { class: "card", testid: "task-row", data: { taskId: t.task_id, state: t.state } },
    h(
      "div",
      { class: "head" },
      badge(t.state),
      h("span", { class: "tool-name", text: t.kind }),
      h("span", { class: "mono muted", text: shortId(t.task_id), title: t.task_id }),
      h("span", { class: "who", text: t.principal }),
      stamp(t.enqueued_at_ms),
    ),
    pairs([
      ["attempts", `${t.attempts} of ${t.max_attempts}`],
      ["worker", t.worker],
      ["reclaims", t.reclaims || ""],
      ["retry", t.retry_at_ms ? stamp(t.retry_at_ms) : ""],
      ["took", t.ended_at_ms ? took(t.enqueued_at_ms, t.ended_at_ms) : ""],
      ["cancelled by", t.cancelled_by],
      ["why", t.cancel_reason],
    ]),
    t.error
      ? h("pre", {
          class: "tool-error",
          testid: "task-error",
          text: `${t.error_kind ?? "error"}: ${t.error}`,
        })
      : null,
    h(
      "details",
      {},
      h("summary", { text: "Payload and result" }),
      h("pre", { class: "args", text: pretty(t.payload) }),
      t.result !== null && t.result !== undefined
        ? h("pre", { class: "args", text: pretty(t.result) })
        : null,
    ),
    cancels
      ? h("button", {
          type: "button",
          class: "small danger",
          testid: "task-cancel",
          text: "Cancel task",
          on: { click: (ev) => cancelTask(t, ev.target) },
        })
      : null,
  );
}

async function cancelTask(t, button) {
  button.disabled = true;
  try {
    const after = await api.post(`/v1/tasks/${enc(t.task_id)}/cancel`, {});
    toast(`Task ${t.kind} ${after.state} by ${after.cancelled_by ?? "?"}.`);
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 409)
      toast(`Not cancelled: ${exc.message}`, "error");
    else reportError(exc);
    button.disabled = false;
  } finally {
    tasksPage.refresh().catch(() => {});
  }
}
