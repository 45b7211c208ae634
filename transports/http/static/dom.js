// Building the page from data, as text only: no markup is ever made from what the node sends.

import { ApiError } from "./api.js";

export const $ = (id) => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`console markup lacks #${id}`);
  return node;
};

/** h("div", {class: "x", data: {id: "1"}, on: {click: fn}}, "text", child) */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "data")
      for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
    else if (key === "on")
      for (const [k, fn] of Object.entries(value)) node.addEventListener(k, fn);
    else if (key === "testid") node.dataset.testid = String(value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(node) {
  node.replaceChildren();
}

/**
 * Make `list` show `items` in order, re-rendering only the items whose data changed, so a
 * poll does not replace the element under the pointer or reset keyboard focus.
 */
export function reconcile(list, items, keyOf, render) {
  const old = new Map([...list.children].map((li) => [li.dataset.key, li]));
  const nodes = items.map((item) => {
    const key = keyOf(item);
    const sig = JSON.stringify(item);
    const li = old.get(key);
    if (li && li.dataset.sig === sig) return li;
    const fresh = render(item);
    fresh.dataset.key = key;
    fresh.dataset.sig = sig;
    if (li && document.activeElement === li) queueMicrotask(() => fresh.focus());
    return fresh;
  });
  const same =
    nodes.length === list.children.length && nodes.every((n, i) => list.children[i] === n);
  if (!same) list.replaceChildren(...nodes);
}

export function shortId(id) {
  if (!id) return "";
  return id.length > 10 ? `${id.slice(0, 4)}…${id.slice(-6)}` : id;
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export function clock(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

export function when(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleString([], { hour12: false });
}

export function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(ms).toLocaleDateString();
}

export function until(ms) {
  if (!ms) return "";
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return "expiring";
  if (s < 120) return `expires in ${s}s`;
  return `expires in ${Math.round(s / 60)}m`;
}

/** How long from `start` to `end` (or now), for people: 850 ms, 4.2 s, 3 m 5 s, 2 h 10 m. */
export function took(start, end) {
  if (!start) return "";
  const ms = Math.max(0, (end || Date.now()) - start);
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} m`;
}

/** A time shown relative to now, with the full local time on hover. */
export function stamp(ms, testid) {
  return h("time", {
    datetime: ms ? new Date(ms).toISOString() : null,
    title: when(ms),
    text: ago(ms),
    testid,
  });
}

/** JSON for people: one line when short, indented otherwise; raw text stays as it is. */
export function pretty(value) {
  let v = value;
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch {
      return value;
    }
  }
  try {
    const line = JSON.stringify(v);
    return line.length <= 72 ? line : JSON.stringify(v, null, 2);
  } catch {
    return String(value);
  }
}

export function toast(message, kind = "info") {
  const node = h("div", { class: `toast ${kind}`, text: message });
  $("toasts").append(node);
  setTimeout(() => node.remove(), kind === "error" ? 8000 : 4000);
}

/** An API error as a toast (a 401 says nothing: the login form says it). */
export function reportError(exc) {
  if (exc instanceof ApiError && exc.status === 401) return;
  toast(exc instanceof ApiError ? exc.message : `Unexpected error: ${exc}`, "error");
}

export function badge(state, extra = "") {
  return h("span", {
    class: `badge state-${state} ${extra}`.trim(),
    text: String(state).replaceAll("_", " "),
  });
}

/** A keydown handler that runs `fn` on Enter or Space (for list items that act as buttons). */
export function onEnter(fn) {
  return (ev) => {
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      fn();
    }
  };
}

/** A link to the sessions page showing one run (its tape). */
export function runLink(runId, text) {
  return h("a", {
    href: `#run=${encodeURIComponent(runId)}`,
    class: "run-link",
    text: text ?? `run ${shortId(runId)}`,
  });
}

/** A link to the sessions page with one session selected. */
export function sessionLink(sessionId, text) {
  return h("a", {
    href: `#session=${encodeURIComponent(sessionId)}`,
    class: "session-link",
    text: text ?? `session ${shortId(sessionId)}`,
  });
}

/** <dl> pairs, leaving out empty values: pairs([["turns", 3], ["ended", ""]]). */
export function pairs(rows, props = {}) {
  const dl = h("dl", { class: "pairs", ...props });
  for (const [k, v] of rows) {
    if (v === null || v === undefined || v === "") continue;
    dl.append(h("div", {}, h("dt", { text: k }), h("dd", {}, v instanceof Node ? v : String(v))));
  }
  return dl;
}
