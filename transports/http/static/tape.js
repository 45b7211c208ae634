// The run pane of the sessions page: a run's summary and its tape, followed live.

import { ApiError, TERMINAL, api, enc, followTape } from "./api.js";
import { approvalControls, dropFromQueue, markResolved } from "./approvals.js";
import {
  $,
  append,
  badge,
  clear,
  clock,
  h,
  pairs,
  plural,
  pretty,
  reportError,
  shortId,
  toast,
  took,
  until,
} from "./dom.js";
import { can, ownerOf, state } from "./state.js";
import { markSelected, refreshRuns, selectSession, writeRoute } from "./work.js";

const FINISHED_STATES = new Set(["done", "failed", "cancelled"]);

export function updateCancel() {
  const owner = state.runSessionId ? ownerOf(state.runSessionId) : undefined;
  $("cancel-run").hidden =
    !state.runId || FINISHED_STATES.has(state.runState) || !can("run.cancel", owner);
}

/** Close the open run, if any: the run pane says to select one. */
export function renderNoRun() {
  state.tapeAbort?.abort();
  state.tapeAbort = null;
  state.runId = null;
  state.runState = null;
  state.runSessionId = null;
  clear($("tape"));
  $("tape-empty").hidden = false;
  $("run-id").textContent = "";
  $("run-state").hidden = true;
  $("cancel-run").hidden = true;
  $("run-summary").hidden = true;
  $("stream-status").textContent = "";
}

export function openRun(runId) {
  state.tapeAbort?.abort();
  state.runId = runId;
  state.runState = null;
  state.runStateFromTape = false;
  state.runSessionId = null;
  writeRoute();
  markSelected();
  const tape = $("tape");
  clear(tape);
  tape.dataset.runId = runId;
  $("tape-empty").hidden = true;
  $("run-id").textContent = runId;
  $("run-summary").hidden = true;
  setRunState("accepted");
  const abort = new AbortController();
  state.tapeAbort = abort;
  const ctx = { runId, outputs: new Map(), approvalCards: new Map() };
  api
    .get(`/v1/runs/${enc(runId)}`)
    .then((run) => {
      if (abort.signal.aborted) return;
      if (run.session_id && run.session_id !== state.sessionId) selectSession(run.session_id);
      renderRunSummary(run);
    })
    .catch((exc) => {
      // Not in the views yet (just started): the summary comes with the terminal entry.
      if (!(exc instanceof ApiError && exc.status === 404)) reportError(exc);
    });
  followTape(
    runId,
    abort.signal,
    (entry) => {
      if (abort.signal.aborted) return;
      renderEntry(ctx, entry);
    },
    (status) => {
      if (abort.signal.aborted) return;
      const node = $("stream-status");
      node.textContent = status;
      node.className = `stream-status ${status.replace(" ", "-")}`;
    },
  );
}

function setRunState(s) {
  state.runState = s;
  const node = $("run-state");
  node.hidden = false;
  node.textContent = s.replace("_", " ");
  node.className = `badge state-${s}`;
  node.dataset.state = s;
  updateCancel();
}

export function renderRunSummary(run) {
  if (run.run_id !== state.runId) return;
  state.runSessionId = run.session_id;
  // The tape is newer than any record read beside it: once it has said where the run is, a
  // record read a moment earlier (still "accepted") changes nothing unless the run has ended.
  if (FINISHED_STATES.has(run.state) || !state.runStateFromTape) setRunState(run.state);
  const dl = $("run-summary");
  const rows = pairs([
    ["principal", run.principal],
    ["turns", run.turns],
    ["tool calls", run.tool_calls],
    ["tokens", `${run.prompt_tokens} in / ${run.completion_tokens} out`],
    ["accepted", clock(run.accepted_at_ms)],
    ["ended", clock(run.ended_at_ms)],
    ["took", run.ended_at_ms ? took(run.accepted_at_ms, run.ended_at_ms) : ""],
    ["reason", run.termination_reason],
    [run.state === "cancelled" ? "cancelled by" : "message", run.message],
  ]);
  dl.replaceChildren(...rows.children);
  dl.hidden = false;
}

export async function cancelRun() {
  if (!state.runId) return;
  try {
    await api.post(`/v1/runs/${enc(state.runId)}/cancel`, {});
    toast("Cancel requested.");
  } catch (exc) {
    reportError(exc);
  }
}

const KIND_LABEL = {
  "run.accepted": "message",
  "run.started": "started",
  "run.context_assembled": "context",
  "run.output": "output",
  "run.turn_completed": "turn",
  "run.awaiting_approval": "waiting",
  "run.resumed": "resumed",
  "run.completed": "done",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
  "tool.proposed": "tool call",
  "tool.decided": "decision",
  "tool.approval_requested": "approval",
  "tool.approval_resolved": "approval",
  "tool.completed": "result",
};

const RUN_STATE_OF = {
  "run.accepted": "accepted",
  "run.started": "in_progress",
  "run.resumed": "in_progress",
  "run.awaiting_approval": "awaiting_approval",
  "run.completed": "done",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
};

function renderEntry(ctx, entry) {
  const tape = $("tape");
  const pane = tape.parentElement;
  const stick = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 48;
  const follow = () => {
    if (stick) pane.scrollTop = pane.scrollHeight;
  };
  const ev = entry.event ?? {};
  const kind = entry.kind ?? ev.kind;
  const next = RUN_STATE_OF[kind];
  if (next) {
    state.runStateFromTape = true;
    setRunState(next);
  }

  // Streamed output: consecutive chunks of one turn grow one block.
  if (kind === "run.output") {
    const last = tape.lastElementChild;
    const block = ctx.outputs.get(ev.turn);
    if (block && last === block.li) {
      block.text.append(document.createTextNode(ev.text ?? ""));
      block.li.dataset.lastSeq = entry.tape_seq;
      follow();
      return;
    }
  }

  const li = h("li", {
    class: `entry kind-${kind.replace(".", "-")}`,
    testid: "tape-entry",
    data: { kind, seq: entry.tape_seq },
  });
  const gutter = h(
    "div",
    { class: "gutter" },
    h("span", { class: "seq", text: `#${entry.tape_seq}` }),
    h("span", { class: "time", text: clock(entry.recorded_at_ms) }),
  );
  const body = h("div", { class: "entry-body" });
  const label = h("span", { class: "kind", text: KIND_LABEL[kind] ?? kind, title: kind });
  li.append(gutter, body);

  switch (kind) {
    case "run.accepted":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          ev.channel ? h("span", { class: "muted", text: `via ${ev.channel}` }) : null,
        ),
        h("pre", { class: "user-text", text: ev.text ?? "" }),
      ]);
      break;
    case "run.started":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "muted", text: [ev.provider, ev.model].filter(Boolean).join(" · ") }),
          h("span", {
            class: "muted",
            text: `budget: ${[
              plural(ev.max_turns, "turn"),
              plural(ev.max_tool_calls, "tool call"),
              `${ev.wall_clock_s}s`,
            ].join(", ")}`,
          }),
        ),
      ]);
      break;
    case "run.context_assembled": {
      // What went into the model input besides the message: summary, memory, references,
      // applied learnings (preferences, procedure hints).
      const items = [];
      if (ev.compaction_id) items.push(`summary ${ev.compaction_id}`);
      for (const m of ev.memory ?? []) {
        items.push(`memory ${m.item_id} · score ${(m.final / 10000).toFixed(2)}`);
      }
      for (const r of ev.references ?? []) {
        const note = r.outcome !== "included" && r.note ? `: ${r.note}` : "";
        items.push(`@${r.kind}:${r.target} · ${r.outcome}${note}`);
      }
      for (const l of ev.learned ?? []) {
        items.push(`learned ${l.kind} · ${l.text}`);
      }
      const prior = ev.prior_runs?.length ?? 0;
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", {
            class: "muted",
            text: [
              `~${ev.estimated_input_tokens} of ${ev.budget_tokens} tokens`,
              plural(prior, "earlier run"),
              ev.dropped_runs ? `${ev.dropped_runs} left out` : null,
            ]
              .filter(Boolean)
              .join(" · "),
          }),
        ),
        items.length
          ? h(
              "ul",
              { class: "context-items", testid: "context-items" },
              ...items.map((t) => h("li", { text: t })),
            )
          : null,
      ]);
      break;
    }
    case "run.output": {
      const text = h("pre", { class: "output-text", testid: "output-text", text: ev.text ?? "" });
      append(body, [
        h("div", { class: "head" }, label, h("span", { class: "muted", text: `turn ${ev.turn}` })),
        text,
      ]);
      ctx.outputs.set(ev.turn, { li, text });
      break;
    }
    case "run.turn_completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", {
            class: "muted",
            text: [
              `turn ${ev.turn}`,
              ev.finish_reason,
              `${ev.prompt_tokens} in / ${ev.completion_tokens} out tokens`,
              plural(ev.tool_calls, "tool call"),
            ].join(" · "),
          }),
        ),
      ]);
      break;
    case "tool.proposed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          h("span", { class: "muted mono", text: ev.call_id }),
        ),
        h("pre", { class: "args", testid: "tool-args", text: pretty(ev.arguments) }),
      ]);
      break;
    case "tool.decided":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.outcome ?? "unknown", "outcome"),
        ),
        h(
          "div",
          { class: "detail" },
          ev.reason ? h("span", { text: ev.reason }) : null,
          ev.posture ? h("span", { class: "muted", text: `posture ${ev.posture}` }) : null,
          ev.grant ? h("span", { class: "muted", text: `grant ${ev.grant}` }) : null,
        ),
        ev.policy_ids?.length
          ? h(
              "div",
              { class: "policies" },
              h("span", { class: "muted", text: "policies:" }),
              ev.policy_ids.map((p) => h("code", { class: "policy", text: p })),
            )
          : null,
      ]);
      break;
    case "tool.approval_requested": {
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.risk ?? "unknown", "risk"),
          h("span", { class: "muted", text: until(ev.expires_at_ms) }),
        ),
        h("pre", { class: "args", text: pretty(ev.arguments) }),
      ]);
      if (can("approval.resolve", ownerOf(ev.session_id))) {
        const controls = approvalControls(ev.approval_id, null, ev.scope_options);
        body.append(controls);
        ctx.approvalCards.set(ev.approval_id, controls);
      }
      break;
    }
    case "run.awaiting_approval":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "muted", text: `for approval ${shortId(ev.approval_id)}` }),
        ),
      ]);
      break;
    case "tool.approval_resolved": {
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.decision === "allow" ? "allowed" : "denied", "decision"),
          h("span", { class: "muted", text: `scope ${ev.scope}${boundTo(ev)}` }),
          ev.decided_by
            ? h("span", { class: "decided-by", testid: "resolved-by", text: `by ${ev.decided_by}` })
            : null,
          ev.waited_ms
            ? h("span", { class: "muted", text: `after ${(ev.waited_ms / 1000).toFixed(1)}s` })
            : null,
        ),
        ev.reason ? h("div", { class: "detail", text: ev.reason }) : null,
      ]);
      state.resolved.add(ev.approval_id);
      const controls = ctx.approvalCards.get(ev.approval_id);
      if (controls) markResolved(controls, ev);
      dropFromQueue(ev.approval_id);
      break;
    }
    case "run.resumed":
      append(body, [h("div", { class: "head" }, label)]);
      break;
    case "tool.completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          label,
          h("span", { class: "tool-name", text: ev.tool }),
          badge(ev.ok ? "ok" : "error", "result"),
          ev.error_kind ? h("span", { class: "muted", text: ev.error_kind }) : null,
          ev.truncated ? h("span", { class: "muted", text: "truncated" }) : null,
          ev.duration_ms ? h("span", { class: "muted", text: `${ev.duration_ms} ms` }) : null,
        ),
        ev.output
          ? h("pre", { class: "tool-output", testid: "tool-output", text: pretty(ev.output) })
          : null,
        ev.error ? h("pre", { class: "tool-error", text: ev.error }) : null,
      ]);
      break;
    case "run.completed":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("done", "terminal"),
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
        h("pre", { class: "answer", testid: "answer", text: ev.answer ?? "" }),
      ]);
      break;
    case "run.failed":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("failed", "terminal"),
          h("span", { text: ev.reason }),
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
        ev.message ? h("pre", { class: "tool-error", text: ev.message }) : null,
      ]);
      break;
    case "run.cancelled":
      append(body, [
        h(
          "div",
          { class: "head" },
          badge("cancelled", "terminal"),
          h("span", { text: ev.reason }),
          ev.requested_by ? h("span", { class: "muted", text: `by ${ev.requested_by}` }) : null,
          h("span", { class: "muted", text: terminalStats(ev) }),
        ),
      ]);
      break;
    default:
      append(body, [
        h("div", { class: "head" }, label),
        h("pre", { class: "args", text: pretty(ev) }),
      ]);
  }
  tape.append(li);
  if (TERMINAL.has(kind)) {
    api
      .get(`/v1/runs/${enc(ctx.runId)}`)
      .then(renderRunSummary)
      .catch(() => {});
    refreshRuns().catch(() => {});
  }
  follow();
}

/** ", prefix 'git status'": what a session grant is bound to, when it is bound. */
function boundTo(ev) {
  if (!ev.match || ev.match === "any") return "";
  return ev.match === "prefix" ? `, prefix ${JSON.stringify(ev.prefix ?? "")}` : `, ${ev.match}`;
}

function terminalStats(ev) {
  const parts = [];
  if (ev.turns !== undefined) parts.push(plural(ev.turns, "turn"));
  if (ev.tool_calls !== undefined) parts.push(plural(ev.tool_calls, "tool call"));
  if (ev.prompt_tokens !== undefined)
    parts.push(`${ev.prompt_tokens} in / ${ev.completion_tokens} out tokens`);
  return parts.join(" · ");
}
