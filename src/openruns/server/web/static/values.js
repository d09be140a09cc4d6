// Metric keys logged at one step only (a one-step eval's accuracy, a final score), as values in
// a table at the top of their section rather than charts of a lone dot (issue 24): one row per
// key, one column per run, the step it was logged at, and a bar for a value between 0 and 1
// (accuracies, pass rates). ChartGrid moves a key to a chart once it has a second point.

import { formatNumber, h } from "./common.js";

export class ValueTable {
  // sources: [{runId, label}] as ChartGrid has them.
  constructor(sources) {
    this.sources = sources;
    this.keys = new Map(); // key -> {part, byRun: Map(runId -> {step, value})}
  }

  // `key`'s one point in run `runId`, shown in section element `part`.
  set(part, key, runId, point) {
    if (!this.keys.has(key)) this.keys.set(key, { part, byRun: new Map() });
    this.keys.get(key).byRun.set(runId, point);
    this.render(part);
  }

  // `key` has become a chart.
  drop(key) {
    const entry = this.keys.get(key);
    if (!entry) return;
    this.keys.delete(key);
    this.render(entry.part);
  }

  render(part) {
    const keys = [...this.keys].filter(([, entry]) => entry.part === part).sort(([a], [b]) => (a < b ? -1 : 1));
    let block = part.querySelector(":scope > .values");
    if (!keys.length) {
      block?.remove();
      return;
    }
    if (!block) {
      block = h("div", { class: "values" });
      const title = part.querySelector(":scope > .section-title, :scope > summary");
      title.after(block);
    }
    const several = this.sources.length > 1;
    const head = several
      ? this.sources.map((s) => h("th", { scope: "col", class: "num" }, s.label))
      : [h("th", { scope: "col", class: "num" }, "Value"), h("th", { scope: "col" }, "")];
    block.replaceChildren(h("table", { class: "grid kv values" },
      h("caption", {}, "Logged at one step"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Metric"), head)),
      h("tbody", {}, keys.map(([key, { byRun }]) => h("tr", { dataset: { key } },
        h("th", { scope: "row" }, key),
        this.sources.map((s) => cells(byRun.get(s.runId), several)))))));
  }
}

// A run's value of a key (or a dash), its step, and a bar when it lies in [0, 1].
function cells(point, several) {
  if (!point) return h("td", { class: "num muted" }, "—");
  const { step, value } = point;
  const bar = typeof value === "number" && value >= 0 && value <= 1
    ? h("meter", { min: "0", max: "1", value: String(value), title: formatNumber(value) }) : null;
  const at = h("span", { class: "muted" }, ` at step ${formatNumber(step)}`);
  if (several) return h("td", { class: "num", dataset: { value } }, formatNumber(value), at, bar ? [" ", bar] : null);
  return [h("td", { class: "num", dataset: { value } }, formatNumber(value), at), h("td", {}, bar)];
}
