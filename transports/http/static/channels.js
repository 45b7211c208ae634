// The channels page: each configured chat channel with its router policy, paired senders and
// pending pairings (GET /v1/channels, channel.list; never a secret), and a single-use pairing
// code for principals that may mint one (POST /v1/channels/{name}/pair-codes, channel.pair).

import { api, enc } from "./api.js";
import { $, badge, h, pairs, pretty, reconcile, reportError, until } from "./dom.js";
import { can } from "./state.js";

/** Codes minted in this document, by channel: shown once, never read back from the node. */
const minted = new Map();

export const channelsPage = {
  name: "channels",
  every: 5000,
  may: () => can("channel.list"),

  wire() {},

  enter() {
    return this.refresh();
  },

  /** A code minted here is shown until the page is left, never again. */
  leave() {
    minted.clear();
    $("channels-list").replaceChildren();
  },

  async refresh() {
    const { items } = await api.get("/v1/channels");
    const shown = items.map((c) => ({ ...c, code: minted.get(c.name) ?? null }));
    reconcile($("channels-list"), shown, (c) => c.name, channelCard);
    $("channels-none").hidden = items.length > 0;
  },
};

function channelCard(c) {
  return h(
    "li",
    { class: "card", testid: "channel", data: { channel: c.name } },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: c.name }),
      badge(c.kind, "kind"),
      badge(c.enabled ? "enabled" : "disabled"),
    ),
    pairs([
      ["direct messages", c.dm_policy],
      ["groups", c.group_policy],
      ["broadcast", c.broadcast],
      ["mention needed", c.require_mention ? "yes" : "no"],
      ["session per sender", c.isolate_session_by_sender ? "yes" : "no"],
      ["coalesce", `${c.coalesce_ms} ms`],
      ["allowed senders", c.allow_from],
      ["denied senders", c.deny_from],
      ["paired", h("span", { testid: "channel-paired", text: c.paired })],
      ["pairings pending", c.pending_pairings],
    ]),
    Object.keys(c.connector ?? {}).length
      ? h(
          "details",
          {},
          h("summary", { text: "Connector" }),
          h("pre", { class: "args", text: pretty(c.connector) }),
        )
      : null,
    c.code
      ? h(
          "p",
          { class: "minted", testid: "pair-code" },
          "Pairing code (single use, shown only now, ",
          until(c.code.expires_at_ms),
          "): ",
          h("output", { class: "mono secret", text: c.code.code }),
        )
      : null,
    can("channel.pair")
      ? h("button", {
          type: "button",
          class: "small",
          testid: "mint-pair-code",
          text: "New pairing code",
          on: { click: (ev) => mint(c.name, ev.target) },
        })
      : null,
  );
}

async function mint(name, button) {
  button.disabled = true;
  try {
    minted.set(name, await api.post(`/v1/channels/${enc(name)}/pair-codes`, {}));
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
    channelsPage.refresh().catch(reportError);
  }
}
