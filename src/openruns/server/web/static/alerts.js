// The alerts page: the team's rules (each can be switched on and off here) and the delivery
// log, newest first, polled. Rules are added with the CLI or the API.

import { api, apiSend, fill, h, poll, showError, statusBadge, timeCell, View } from "./common.js";

const el = (id) => document.getElementById(id);
const view = new View();

export function describe(condition) {
  switch (condition.type) {
    case "failed": return (condition.statuses ?? ["failed", "crashed"]).join(" or ");
    case "silent": return `silent ${condition.minutes} min`;
    case "nonfinite": return `${condition.metric ?? "*"} NaN/inf`;
    case "threshold": {
      const window = condition.window_minutes != null ? `${condition.window_minutes} min` : `${condition.window_points ?? 1} pts`;
      return `${condition.stat ?? "mean"}(${condition.metric}, ${window}) ${condition.op} ${condition.value}`;
    }
    case "error_rate": return `error rate > ${condition.above} of ${condition.window_episodes ?? 100}`;
    default: return condition.type;
  }
}

function ruleRow(rule) {
  const toggle = h("button", {
    type: "button",
    class: "link",
    onclick: async () => {
      try {
        await apiSend("PATCH", `/alerts/rules/${rule.id}`, { enabled: !rule.enabled });
        await load();
      } catch (error) {
        showError(error);
      }
    },
  }, rule.enabled ? "on (switch off)" : "off (switch on)");
  return h("tr", { dataset: { id: rule.id } },
    h("td", {}, rule.name),
    h("td", {}, rule.project ? `${rule.team_id} / ${rule.project}` : rule.team_id),
    h("td", {}, h("code", {}, describe(rule.condition))),
    h("td", {}, h("span", { class: "muted" }, `${rule.webhook.format} → `), rule.webhook.url),
    h("td", {}, toggle));
}

function deliveryRow(d) {
  const event = d.event ?? {};
  const run = d.run_id ? h("a", { href: `/runs/${encodeURIComponent(d.run_id)}` }, h("code", {}, d.run_id)) : "—";
  const answer = d.last_error ?? (d.response_status ? `HTTP ${d.response_status}` : "—");
  return h("tr", { dataset: { id: d.id } },
    h("td", {}, timeCell(d.created_at)),
    h("td", {}, d.rule_name ?? String(d.rule_id)),
    h("td", {}, run),
    h("td", {}, h("span", { class: "badge" }, event.level ?? "info"), " ", event.title ?? ""),
    h("td", {}, statusBadge(d.status)),
    h("td", {}, String(d.attempts)),
    h("td", { class: "muted" }, answer));
}

async function load() {
  const read = view.begin();
  const [rules, deliveries] = await Promise.all([
    api("/alerts/rules", {}, { read }),
    api("/alerts/deliveries", { limit: 100 }, { read }),
  ]);
  if (!read.current()) return;
  fill(el("rules").tBodies[0], rules.items.map(ruleRow));
  el("rules-empty").hidden = rules.items.length > 0;
  fill(el("deliveries").tBodies[0], deliveries.items.map(deliveryRow));
  el("deliveries-empty").hidden = deliveries.items.length > 0;
}

poll(load, 5000);
