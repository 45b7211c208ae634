// The MCP page: each configured MCP server with its state, why it failed, and every tool it
// announced or config names, allowed or not, with its posture (GET /v1/mcp/servers, tool.list),
// and a test for principals that may (POST /v1/mcp/servers/{name}/test, mcp.test). docs/mcp.md.

import { api, enc } from "./api.js";
import { $, badge, h, pairs, reconcile, reportError } from "./dom.js";
import { can } from "./state.js";

export const mcpPage = {
  name: "mcp",
  every: 5000,
  may: () => can("tool.list"),

  wire() {},

  enter() {
    return this.refresh();
  },

  leave() {},

  async refresh() {
    const { items } = await api.get("/v1/mcp/servers");
    reconcile($("mcp-list"), items, (s) => s.name, serverCard);
    $("mcp-none").hidden = items.length > 0;
  },
};

function serverCard(s) {
  return h(
    "li",
    { class: "card", testid: "mcp-server", data: { server: s.name } },
    h(
      "div",
      { class: "head" },
      h("span", { class: "tool-name", text: s.name }),
      badge(s.transport, "kind"),
      h("span", { testid: "mcp-state" }, badge(s.state)),
    ),
    pairs([
      ["reason", s.reason ?? "-"],
      ["protocol", s.protocol_version ?? "-"],
      ["starts", s.starts],
    ]),
    h(
      "ul",
      { class: "list", testid: "mcp-tools" },
      ...s.tools.map((t) =>
        h(
          "li",
          { testid: "mcp-tool", data: { tool: t.tool } },
          h("span", { class: "mono", text: t.tool }),
          " ",
          badge(t.allowed ? t.posture : "not allowed"),
          t.unavailable ? h("span", { class: "muted", text: ` ${t.unavailable}` }) : null,
        ),
      ),
    ),
    can("mcp.test")
      ? h("button", {
          type: "button",
          class: "small",
          testid: "mcp-test",
          text: "Test",
          on: { click: (ev) => test(s.name, ev.target) },
        })
      : null,
  );
}

async function test(name, button) {
  button.disabled = true;
  try {
    await api.post(`/v1/mcp/servers/${enc(name)}/test`, {});
  } catch (exc) {
    reportError(exc);
  } finally {
    button.disabled = false;
    mcpPage.refresh().catch(reportError);
  }
}
