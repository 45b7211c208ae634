// The console's one way to the node: the HTTP API (docs/http-api.md), every /v1 call with
// `Authorization: Bearer <token>`. The token lives in sessionStorage only (never in a URL or
// localStorage). A run's tape is followed over Server-Sent Events read with fetch() and a
// streaming body reader, because EventSource cannot send the bearer header.

export const TOKEN_KEY = "reel.token";
/** The tape entries that end a run: exactly one is the last of every run's tape. */
export const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled"]);

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

/** The error message of an API error body, whatever its exact shape. */
function errorMessage(body, fallback) {
  if (!body || typeof body !== "object") return fallback;
  const err = body.error ?? body;
  if (typeof err === "string") return body.message ? `${err}: ${body.message}` : err;
  const parts = [err.message ?? err.detail ?? err.problem ?? err.title ?? err.code];
  if (err.field && !String(parts[0] ?? "").includes(err.field)) parts.unshift(`${err.field}:`);
  const text = parts.filter(Boolean).join(" ");
  return text || fallback;
}

export const api = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  /** Called with the error when the node refuses the token (401). */
  onUnauthorized: () => {},

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  },

  async request(method, path, body) {
    const init = {
      method,
      headers: this.headers({ Accept: "application/json" }),
      cache: "no-store",
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch {
      throw new ApiError(0, "the node is unreachable");
    }
    return this.decode(res);
  },

  async decode(res) {
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (res.status === 401) {
      this.onUnauthorized();
      throw new ApiError(401, "the token was not accepted");
    }
    if (!res.ok) {
      const fallback = `${res.status} ${res.statusText || "error"}`;
      throw new ApiError(res.status, errorMessage(data, fallback), data?.error?.field);
    }
    return data;
  },

  get(path) {
    return this.request("GET", path);
  },
  post(path, body) {
    return this.request("POST", path, body ?? {});
  },
  delete(path) {
    return this.request("DELETE", path);
  },
};

/** What `/healthz` says (public: no token): `{status: "ok" | "draining" | "unreachable",
 * version}`. */
export async function health() {
  let res;
  try {
    res = await fetch("/healthz", { cache: "no-store" });
  } catch {
    return { status: "unreachable", version: "" };
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    // not the node's JSON: a proxy's error page
  }
  const version = typeof body?.version === "string" ? body.version : "";
  if (body?.status === "draining") return { status: "draining", version };
  return { status: res.ok ? "ok" : "unreachable", version };
}

/** A query string of the params that have a value: q({state: "failed", after: undefined}). */
export function q(params) {
  const usp = new URLSearchParams();
  for (const [k, v] of Object.entries(params))
    if (v !== undefined && v !== null && v !== "") usp.set(k, v);
  const s = usp.toString();
  return s ? `?${s}` : "";
}

export const enc = encodeURIComponent;

/** The list and cursor of a paged response ({items, next_after}). */
export function page(data) {
  if (Array.isArray(data)) return { items: data, next: null };
  return { items: data?.items ?? [], next: data?.next_after ?? null };
}

/** Every item of a paged route, following next_after, at most `cap` items. */
export async function readAll(pathFor, cap) {
  const out = [];
  let after;
  for (;;) {
    const { items, next } = page(await api.get(pathFor(after)));
    out.push(...items);
    if (!next || out.length >= cap || next === after) return out.slice(0, cap);
    after = next;
  }
}

// --- SSE over fetch -------------------------------------------------------------------------

/**
 * Follow a run's tape: call onEntry(entry) for every TapeEntry in tape_seq order, exactly once
 * each, reconnecting (Last-Event-ID / ?after=) until a terminal entry arrives or the signal
 * aborts. onStatus(text) reports the connection state.
 */
export async function followTape(runId, signal, onEntry, onStatus) {
  let last = -1;
  let ended = false;
  let failures = 0;
  let misses = 0;
  const deliver = (entry) => {
    if (typeof entry?.tape_seq !== "number" || entry.tape_seq <= last) return;
    last = entry.tape_seq;
    onEntry(entry);
    if (TERMINAL.has(entry.kind)) ended = true;
  };
  while (!signal.aborted && !ended) {
    onStatus(failures ? "reconnecting" : "connecting");
    try {
      const headers = api.headers({ Accept: "text/event-stream" });
      if (last >= 0) headers["Last-Event-ID"] = String(last);
      const url = `/v1/runs/${enc(runId)}/events${last >= 0 ? q({ after: last }) : ""}`;
      const res = await fetch(url, { headers, signal, cache: "no-store" });
      if (!res.ok || !res.body) {
        await api.decode(res); // raises with the API's message (and logs out on 401)
        throw new ApiError(res.status, "the event stream has no body");
      }
      onStatus("live");
      failures = 0;
      misses = 0;
      await readEvents(res.body, signal, (event) => {
        if (!event.data) return;
        let entry;
        try {
          entry = JSON.parse(event.data);
        } catch {
          return;
        }
        deliver(entry);
      });
    } catch (exc) {
      if (signal.aborted) return;
      if (exc instanceof ApiError && exc.status === 401) {
        onStatus("logged out");
        return;
      }
      // A run started a moment ago may not be in the views yet: a 404 is retried for a while.
      if (exc instanceof ApiError && exc.status === 404 && ++misses > 20) {
        onStatus("unknown run");
        return;
      }
      failures += 1;
    }
    if (!ended && !signal.aborted && misses === 0) {
      // The stream ended before the run did (a restart, a proxy time-out): read the tape
      // page-wise to catch up, then listen again.
      try {
        await catchUp(runId, () => last, deliver);
      } catch {
        failures += 1;
      }
    }
    if (!ended && !signal.aborted) {
      await sleep(misses ? 250 : Math.min(5000, 250 * 2 ** Math.min(failures, 5)), signal);
    }
  }
  if (ended) onStatus("ended");
}

async function catchUp(runId, lastSeq, deliver) {
  for (;;) {
    const after = lastSeq();
    const data = await api.get(
      `/v1/runs/${enc(runId)}/tape${q({ after: after >= 0 ? after : undefined, limit: 500 })}`,
    );
    const { items } = page(data);
    items.forEach(deliver);
    if (items.length < 500) return;
  }
}

/** Parse a text/event-stream body: calls onEvent({id, event, data}) per dispatched event. */
async function readEvents(body, signal, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const stop = () => reader.cancel().catch(() => {});
  signal.addEventListener("abort", stop, { once: true });
  let buf = "";
  let cur = { id: null, event: "message", data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (cur.data.length) onEvent({ id: cur.id, event: cur.event, data: cur.data.join("\n") });
          cur = { id: cur.id, event: "message", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue; // comment / keep-alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") cur.data.push(val);
        else if (field === "event") cur.event = val;
        else if (field === "id") cur.id = val;
      }
    }
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });
}
