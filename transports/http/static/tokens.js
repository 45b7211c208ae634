// The tokens page (token.manage: admins): every API token with its principal, roles, state and
// last use (GET /v1/tokens, never a token itself); make one (POST /v1/tokens: the token is
// shown this once) and revoke one (DELETE /v1/tokens/{id}).

import { ApiError, api, enc } from "./api.js";
import { $, badge, h, pairs, reconcile, reportError, stamp, toast } from "./dom.js";
import { can, state } from "./state.js";

const DAY_S = 86400;

export const tokensPage = {
  name: "tokens",
  every: 5000,
  may: () => can("token.manage"),

  wire() {
    $("token-form").addEventListener("submit", createToken);
  },

  enter() {
    return this.refresh();
  },

  /** A token made here is shown until the page is left, never again. */
  leave() {
    $("token-made").hidden = true;
    $("token-made-value").textContent = "";
  },

  async refresh() {
    const { items } = await api.get("/v1/tokens");
    const newest = [...items].reverse();
    reconcile($("tokens-list"), newest, (t) => t.id, tokenCard);
    $("tokens-none").hidden = items.length > 0;
  },
};

function tokenCard(t) {
  return h(
    "li",
    { class: `card token-${t.state}`, testid: "token", data: { tokenId: t.id, state: t.state } },
    h(
      "div",
      { class: "head" },
      badge(t.state),
      h("span", { class: "who", testid: "token-principal", text: t.principal }),
      ...t.roles.map((r) => h("span", { class: "role", text: r })),
      t.id === state.me?.token_id ? h("span", { class: "muted", text: "(this console's)" }) : null,
    ),
    pairs([
      ["id", h("span", { class: "mono", text: t.id })],
      ["created", stamp(t.created_at_ms)],
      ["expires", t.expires_at_ms ? stamp(t.expires_at_ms) : "never"],
      ["revoked", t.revoked_at_ms ? stamp(t.revoked_at_ms) : ""],
      ["last used", t.last_used_at_ms ? stamp(t.last_used_at_ms) : "never"],
      ["note", t.note],
    ]),
    t.state === "active" ? revokeControls(t) : null,
  );
}

/** Revoke asks once more before it acts: a revoked token is refused from the next request on. */
function revokeControls(t) {
  const confirm = h("button", {
    type: "button",
    class: "small danger",
    testid: "confirm-revoke",
    text: `Revoke ${t.principal}'s token now`,
    hidden: true,
    on: { click: () => revoke(t, confirm) },
  });
  const ask = h("button", {
    type: "button",
    class: "small danger",
    testid: "revoke-token",
    text: "Revoke…",
    on: {
      click: () => {
        ask.hidden = true;
        confirm.hidden = false;
        confirm.focus();
      },
    },
  });
  return h("div", { class: "controls" }, ask, confirm);
}

async function revoke(t, button) {
  button.disabled = true;
  try {
    await api.delete(`/v1/tokens/${enc(t.id)}`);
    toast(`Revoked ${t.principal}'s token ${t.id}.`);
  } catch (exc) {
    reportError(exc);
    button.disabled = false;
  } finally {
    tokensPage.refresh().catch(reportError);
  }
}

async function createToken(ev) {
  ev.preventDefault();
  const form = ev.target;
  const problem = $("token-problem");
  problem.textContent = "";
  const roles = [...form.querySelectorAll("input[name=role]:checked")].map((i) => i.value);
  const days = Number($("token-expires").value);
  const body = {
    principal: $("token-principal").value.trim(),
    roles,
    note: $("token-note").value.trim(),
  };
  if (days > 0) body.expires_in_s = days * DAY_S;
  try {
    const made = await api.post("/v1/tokens", body);
    $("token-made-value").textContent = made.token;
    $("token-made-who").textContent = `${made.principal} (${made.roles.join(", ")})`;
    $("token-made").hidden = false;
    form.reset();
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 400) problem.textContent = exc.message;
    else reportError(exc);
  } finally {
    tokensPage.refresh().catch(reportError);
  }
}
