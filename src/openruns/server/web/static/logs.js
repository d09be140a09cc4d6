// The run page's Logs tab: what the run's processes printed (stdout, stderr, launched
// components' output), newest lines first loaded, earlier pages on demand, followed live;
// a failed or crashed run's traceback at the top (the one the SDK reported, else the last
// Python traceback found in the output). Lines come from GET /runs/{id}/logs in arrival order
// (their offsets page them) and are shown in the order they were printed: `openruns launch`
// reads its components' log files in turns, so lines of two components arrive batch by batch
// (issue 24). Where the server dropped the middle of a long output, a marker says how much.
// The lines shown are the newest read of them (common.js View): a read for the filters before
// never lands over the one for the filters now.

import { api, fill, formatNumber, formatTime, h, isAbandoned, View } from "./common.js";

// Printing order: time, then arrival (offset) among lines of the same time.
const printed = (a, b) => a.ts - b.ts || a.offset - b.offset;

const PAGE = 1000;
const SCAN_LINES = 3000; // lines searched for a traceback when the SDK reported none

// The last Python traceback in `items` (log lines in order), from its "Traceback (most recent
// call last):" through its indented frames to the exception line, of one source.
export function findTraceback(items) {
  let start = -1;
  for (let i = items.length - 1; i >= 0; i--) {
    if (items[i].line.startsWith("Traceback (most recent call last):")) {
      start = i;
      break;
    }
  }
  if (start < 0) return null;
  const source = items[start].source;
  const mine = items.slice(start).filter((item) => item.source === source).map((item) => item.line);
  let end = 1;
  while (end < mine.length && (/^\s/.test(mine[end]) || mine[end] === "")) end += 1;
  return { ...items[start], line: mine.slice(0, end + 1).join("\n") };
}

export class LogsView {
  constructor(base) {
    this.base = base;
    this.el = (id) => document.getElementById(id);
    this.items = []; // in arrival (offset) order: the cursors of the next reads
    this.totals = null;
    this.view = new View();
    this.sources = new Set();
    this.started = false;
    this.ready = false; // the first page is in: live reads may follow it
  }

  filters() {
    return { stream: this.el("log-stream").value, source: this.el("log-source").value };
  }

  // First opening: the controls, the traceback of a failed run, the newest lines.
  async start(run) {
    if (this.started) return;
    this.started = true;
    for (const id of ["log-stream", "log-source"]) {
      this.el(id).addEventListener("change", () => this.reload().catch((e) => this.fail(e)));
    }
    this.el("log-older").addEventListener("click", () => this.older().catch((e) => this.fail(e)));
    // (The first lines given up for a filter changed meanwhile: that change's read shows them.)
    await Promise.all([this.reload().catch((e) => this.fail(e)), this.showTraceback(run)]);
  }

  fail(error) {
    if (isAbandoned(error)) return; // a newer read took its place
    this.el("log-status").textContent = `could not read the logs: ${error.message}`;
  }

  async reload() {
    const read = this.view.begin();
    const page = await api(`${this.base}/logs`, { ...this.filters(), tail: "true", limit: PAGE }, { read });
    this.items = page.items;
    this.totals = page.totals;
    this.more = page.items.length === PAGE;
    this.render();
    this.el("log-lines").scrollTop = this.el("log-lines").scrollHeight;
    this.ready = true;
  }

  async older() {
    if (!this.items.length) return;
    const read = this.view.join();
    const items = this.items;
    const page = await api(`${this.base}/logs`, {
      ...this.filters(), tail: "true", limit: PAGE, before: items[0].offset,
    }, { read });
    if (!read.current() || items !== this.items) return; // read again meanwhile
    this.items = [...page.items, ...this.items];
    this.totals = page.totals;
    this.more = page.items.length === PAGE;
    const box = this.el("log-lines");
    const fromBottom = box.scrollHeight - box.scrollTop;
    this.render();
    box.scrollTop = box.scrollHeight - fromBottom;
  }

  // Lines that arrived since the last one shown (a live run).
  async poll() {
    if (!this.ready) return;
    const read = this.view.join();
    const items = this.items;
    const after = items.length ? items[items.length - 1].offset : undefined;
    const page = await api(`${this.base}/logs`, { ...this.filters(), after, limit: PAGE }, { read });
    if (!read.current() || items !== this.items) return; // read again meanwhile
    this.totals = page.totals;
    if (!page.items.length) return this.renderStatus();
    const box = this.el("log-lines");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const shown = box.querySelectorAll(".log-line");
    const lastShown = shown.length ? this.items.find((i) => i.offset === Number(shown[shown.length - 1].dataset.offset)) : null;
    this.items.push(...page.items);
    const fresh = [...page.items].sort(printed);
    if (!lastShown || printed(lastShown, fresh[0]) <= 0) {
      box.querySelector(":scope > p.log-gap")?.remove(); // "Nothing printed yet."
      box.append(...fresh.map((item) => this.lineOf(item)));
    } else this.render(); // a line printed before the last one shown: in its place
    this.renderStatus();
    if (atBottom && this.el("log-follow").checked) box.scrollTop = box.scrollHeight;
  }

  lineOf(item) {
    if (!this.sources.has(item.source)) {
      this.sources.add(item.source);
      this.el("log-source").append(h("option", { value: item.source }, item.source));
    }
    return h("div", { class: `log-line ${item.stream}`, dataset: { offset: item.offset, stream: item.stream } },
      h("span", { class: "ts" }, formatTime(item.ts)),
      h("span", { class: "src", title: `${item.source} · ${item.stream}` }, item.source),
      h("span", { class: "text" }, item.line));
  }

  render() {
    const gap = this.totals?.gap_offset;
    // The gap lies between the lines held on both sides of it (with no earlier page to load).
    const gapHeld = gap !== null && gap !== undefined && this.items.some((i) => i.offset > gap)
      && (!this.more || this.items.some((i) => i.offset < gap));
    const out = [];
    let gapShown = false;
    for (const item of [...this.items].sort(printed)) {
      if (gapHeld && !gapShown && item.offset > gap) {
        out.push(this.gapMarker());
        gapShown = true;
      }
      out.push(this.lineOf(item));
    }
    fill(this.el("log-lines"), out.length ? out : h("p", { class: "log-gap" }, "Nothing printed yet."));
    this.el("log-older").hidden = !this.more;
    this.renderStatus();
  }

  gapMarker() {
    const t = this.totals;
    return h("div", { class: "log-gap", role: "note" },
      `… ${formatNumber(t.dropped_lines)} lines (${formatNumber(t.dropped_bytes)} bytes) dropped here: the run printed more than the server keeps; the first and the last lines are kept …`);
  }

  renderStatus() {
    const t = this.totals;
    if (!t) return;
    const parts = [`${formatNumber(t.lines)} lines printed`, `${formatNumber(this.items.length)} shown`];
    if (t.dropped_lines) parts.push(`${formatNumber(t.dropped_lines)} dropped from the middle`);
    this.el("log-status").textContent = parts.join(" · ");
  }

  // A failed or crashed run: the traceback the SDK reported (stream "traceback"), else the
  // last Python traceback in the output, else nothing.
  async showTraceback(run) {
    const box = this.el("log-traceback");
    if (!["failed", "crashed"].includes(run.status)) {
      box.hidden = true;
      return;
    }
    const reported = await api(`${this.base}/logs`, { stream: "traceback", tail: "true", limit: 1 });
    let found = reported.items[0] || null;
    let how = "reported by the process that failed";
    if (!found) {
      const tail = await api(`${this.base}/logs`, { tail: "true", limit: SCAN_LINES });
      found = findTraceback(tail.items);
      how = "the last traceback printed";
    }
    if (!found) {
      box.hidden = true;
      return;
    }
    fill(box,
      h("strong", {}, `Traceback (${found.source}, ${formatTime(found.ts)})`), " ",
      h("span", { class: "muted" }, how),
      h("pre", { id: "traceback-text" }, found.line));
    box.hidden = false;
  }
}
