// The chart grid of the run and compare pages: charts (charts.js) laid out in sections (metrics
// by step, eval metrics by step, rows logged without a step, system), each in groups by key
// prefix ("train/loss" -> "train"), read several keys per request and drawn one after another
// without blocking the page, those in view first.
//
// A grid of at most EAGER_CHARTS charts reads and draws them all, without waiting to be
// scrolled to. A bigger one (a run of hundreds of metrics, issue 21) reads and draws a chart
// when it comes near the viewport (an IntersectionObserver, a viewport's height ahead), so
// the page's first screen does not wait for 200 charts, and a chart that is never scrolled to
// costs its empty box only. Charts of the collapsed system section wait until it is opened.

import { api, h, prefs } from "./common.js";
import { BandChart, NO_STEPS, SeriesChart, TimeChart, Timeline, followSettings, settings, timeAsSteps } from "./charts.js";
import { ValueTable } from "./values.js";

const KEYS_PER_READ = 8; // metric keys asked for in one request while the grid loads
const SERIES_PER_READ = 500; // the server's bound on runs x keys of one read
export const RUNS_PER_READ = 100; // ... and on its runs (of a series read, and of a keys read)
const READS_IN_FLIGHT = 2;
const DRAW_SLICE_MS = 12; // charts drawn one after another before the page gets a turn
const EAGER_CHARTS = 60; // a grid of more charts draws those near the viewport only
const NEAR = "100% 0px"; // how near the viewport a chart is read, in a grid of more
const SYSTEM_OPEN = "charts.systemOpen"; // the system section's open state, kept in this browser

function emptySeries() {
  return { step: [], value: [], min: [], max: [] };
}

function groupOf(key) {
  const slash = key.indexOf("/");
  return slash > 0 ? key.slice(0, slash) : "(no prefix)";
}

// The sections of a grid, in page order, and their titles.
const SECTIONS = {
  train: "Metrics by step",
  eval: "Eval metrics by step (eval/…)",
  time: "Logged without a step, by wall time",
  system: "System (CPU, memory, disk, network, GPU), by wall time",
};

// Where a metric is drawn: [section, group]. Rows logged without a step never share a chart
// or a group with step series; eval metrics (eval/<env>/...) are grouped apart from training
// ones, by environment; system metrics (system/<kind>/...) by kind.
export function placeOf(key, axis) {
  if (axis === "time") {
    if (key.startsWith("system/")) return ["system", groupOf(key.slice(7))];
    return ["time", groupOf(key)];
  }
  if (key.startsWith("eval/")) {
    const rest = key.slice(5);
    return ["eval", rest.includes("/") ? `eval/${groupOf(rest)}` : "eval"];
  }
  return ["train", groupOf(key)];
}

// A chart's id in a grid: its key, or "time:<key>" for its rows logged without a step.
export function chartId(key, axis = "step") {
  return axis === "time" ? `time:${key}` : key;
}

function slug(text) {
  return text.replace(/[^A-Za-z0-9_-]+/g, "-");
}

const yieldToPage = () => new Promise((resolve) => setTimeout(resolve, 0));

export class ChartGrid {
  // sources: [{runId, label, color, start}]; each gets its Timeline (for time axes).
  constructor(root, sources, { onStep } = {}) {
    this.root = root;
    this.sources = sources.map((s) => ({ ...s, timeline: new Timeline(s.runId) }));
    this.onStep = onStep;
    this.charts = new Map(); // chart id -> SeriesChart or TimeChart
    this.stepKeys = new Set(); // keys logged by step: what a chart's x menu offers
    this.counts = new Map(); // chart id -> Map(runId -> points stored)
    this.queue = []; // chart ids whose charts wait for their first read
    this.deferred = []; // ... and those in a closed section, until it is opened
    this.values = new ValueTable(this.sources);
    this.reading = 0;
    const runsInRead = Math.min(this.sources.length, RUNS_PER_READ);
    this.keysPerRead = Math.max(1, Math.min(KEYS_PER_READ, Math.floor(SERIES_PER_READ / runsInRead)));
    this.slice = 0; // when the current run of draws without yielding to the page began
    this.marker = null;
    this.bands = null;
    this.timelines = null; // the runs' /timeline reads, made once a time axis needs them
    this.unfollow = followSettings(() => this.redraw());
    // Which charts are in the viewport and near it, as IntersectionObservers see them (no
    // layout read of ours: reading boxes after each chart drawn laid the page out each time).
    this.inView = new Set();
    this.near = new Set(); // ... within a viewport's height: read first; only they, in a big grid
    const follow = (set) => (entries) => {
      for (const entry of entries) {
        const id = chartId(entry.target.dataset.key, entry.target.dataset.axis);
        if (entry.isIntersecting) set.add(id);
        else set.delete(id);
      }
      this.pump();
    };
    this.observers = [new IntersectionObserver(follow(this.inView)), new IntersectionObserver(follow(this.near), { rootMargin: NEAR })];
  }

  // Stop following the settings and the viewport, and free the charts (the grid is being
  // replaced).
  dispose() {
    this.unfollow();
    for (const observer of this.observers) observer.disconnect();
    for (const chart of [...this.charts.values(), this.bands].filter(Boolean)) chart.destroy();
  }

  // Add a chart for each (key, axis) not seen yet, in its section and group, in name order,
  // and read it. rows: [{key, axis, count, last_step, last_value, step_metric}] of one run
  // (`runId`), as /metrics/keys gives them; a key with a step metric is drawn against it. A step
  // key with at most one point in every run is a value in its section's table, not a chart of a
  // lone dot (issue 24), until a second point comes.
  setKeys(rows, runId = this.sources[0].runId) {
    const fresh = [];
    for (const { key, axis, count, last_step: step, last_value: value, step_metric } of [...rows].sort((a, b) => (a.key < b.key ? -1 : 1))) {
      const id = chartId(key, axis);
      if (!this.counts.has(id)) this.counts.set(id, new Map());
      this.counts.get(id).set(runId, count);
      if (axis !== "time") this.stepKeys.add(key);
      if (this.charts.has(id)) continue;
      const [section, group] = placeOf(key, axis);
      if (axis !== "time" && [...this.counts.get(id).values()].every((n) => n <= 1)) {
        this.values.set(this.part(section), key, runId, { step, value });
        continue;
      }
      this.values.drop(key);
      const box = this.figure(this.group(section, group), key, axis);
      const Chart = axis === "time" ? TimeChart : SeriesChart;
      const chart = new Chart(box, key, this.sources, { onStep: this.onStep });
      chart.marker = this.marker;
      if (axis !== "time") {
        chart.xKey = step_metric || null;
        box.append(this.xMenu(chart));
      }
      this.charts.set(id, chart);
      for (const observer of this.observers) observer.observe(box);
      fresh.push(id);
    }
    for (const group of this.root.querySelectorAll(".group")) {
      group.querySelector(".count").textContent = `(${group.querySelector(".charts").children.length})`;
    }
    this.queue.push(...fresh);
    this.pump();
  }

  figure(body, key, axis = "step") {
    const box = h("figure", { class: "chart", "aria-label": `chart of ${key}`, dataset: { key, axis } }, h("div", { class: "plot" }));
    const later = [...body.children].find((el) => el.dataset.key > key);
    body.insertBefore(box, later || null);
    return box;
  }

  // A step chart's x menu: the settings' axis, or any metric logged by step, listed when the
  // menu is focused (a click or Tab; so keys that arrived later are there), not before: 200
  // charts of 200 options each were 40,000 elements, ~0.3 s of a 200-chart page's drawing.
  xMenu(chart) {
    const select = h("select", { class: "x-key", "aria-label": `x axis of ${chart.key}` });
    const fill = () => {
      const known = new Set([...this.stepKeys, chart.xKey].filter(Boolean));
      const keys = [...known].filter((k) => k !== chart.key).sort();
      select.replaceChildren(h("option", { value: "" }, "settings axis"),
        ...keys.map((k) => h("option", { value: k }, k)));
      select.value = chart.xKey || "";
    };
    select.append(h("option", { value: chart.xKey || "" }, chart.xKey || "settings axis"));
    select.addEventListener("focus", fill);
    select.addEventListener("change", () => chart.setXKey(select.value));
    return h("figcaption", { class: "x-choice" }, h("label", {}, "x ", select));
  }

  // The reward bands of the episodes, in a group of their own at the top.
  addBands() {
    if (this.bands) return this.bands;
    const group = this.group("train", "rewards of episodes", true);
    const box = this.figure(group, "episodes/reward quantiles");
    box.classList.add("bands");
    this.bands = new BandChart(box, "episodes/reward quantiles", this.sources, {
      onStep: this.onStep, title: "reward of episodes: p10–p90 band, median line",
    });
    group.closest(".group").querySelector(".count").textContent = "(1)";
    this.refreshBands();
    return this.bands;
  }

  async refreshBands() {
    if (!this.bands) return;
    await this.times();
    await this.bands.load();
  }

  // Read queued charts, keysPerRead keys a read (of every run), READS_IN_FLIGHT at a time;
  // each chart draws as soon as its data is in, one at a time, letting the page breathe.
  // The charts in view (or nearest to it, where the reader has scrolled by then) go first; in
  // a grid of more than EAGER_CHARTS, only those near the viewport go.
  // Charts of a closed section (system, collapsed by default) wait until it is opened.
  pump() {
    const closed = this.queue.filter((id) => this.charts.get(id).container.closest("details.chart-section:not([open])"));
    if (closed.length) {
      this.deferred.push(...closed);
      this.queue = this.queue.filter((id) => !closed.includes(id));
    }
    if (this.reading >= READS_IN_FLIGHT) return;
    let ready = this.charts.size > EAGER_CHARTS ? this.queue.filter((id) => this.near.has(id)) : [...this.queue];
    if (ready.length > 1) ready = this.nearestFirst(ready);
    // A read asks for as many points as its charts are wide: one read, charts of one width
    // (a group of one chart spans the section). Widths read once here, one layout.
    const widths = new Map(ready.map((id) => [id, this.charts.get(id).width()]));
    while (this.reading < READS_IN_FLIGHT && ready.length) {
      const width = widths.get(ready[0]);
      const ids = ready.filter((id) => widths.get(id) === width).slice(0, this.keysPerRead);
      const taken = new Set(ids);
      ready = ready.filter((id) => !taken.has(id));
      this.queue = this.queue.filter((id) => !taken.has(id));
      this.reading += 1;
      let released = false;
      const release = () => { // the next read starts while this one's charts are drawn
        if (released) return;
        released = true;
        this.reading -= 1;
        this.pump();
      };
      this.readKeys(ids, width, release)
        .catch((error) => {
          for (const id of ids) this.charts.get(id).plot.textContent = `could not load: ${error.message}`;
        })
        .finally(release);
    }
  }

  // Chart ids, those in view first, then those near it (a stable sort: page order among
  // equals).
  nearestFirst(ids) {
    const rank = (id) => (this.inView.has(id) ? 0 : this.near.has(id) ? 1 : 2);
    return [...ids].sort((a, b) => rank(a) - rank(b));
  }

  // One read for several charts (of every run, on the compare page): step series come in
  // `series`, rows logged without a step in `time` (a read of time-keyed charts only skips
  // the step series).
  async readKeys(ids, width, release) {
    const charts = ids.map((id) => this.charts.get(id));
    const names = [...new Set(charts.map((c) => c.key))];
    const onlyTime = charts.every((c) => c instanceof TimeChart);
    const query = { keys: names.join(","), max_points: width, step_min: onlyTime ? NO_STEPS : undefined };
    let bodies;
    if (this.sources.length === 1) {
      bodies = [await api(`/runs/${encodeURIComponent(this.sources[0].runId)}/metrics`, query)];
    } else { // the compare page: the runs' series in one read (of RUNS_PER_READ), not one each
      const groups = [];
      for (let i = 0; i < this.sources.length; i += RUNS_PER_READ) groups.push(this.sources.slice(i, i + RUNS_PER_READ));
      const answers = await Promise.all(groups.map((group) => api("/metrics", { ...query, runs: group.map((s) => s.runId).join(",") })));
      const byRun = Object.assign({}, ...answers.map((answer) => answer.runs));
      bodies = this.sources.map((s) => byRun[s.runId]);
    }
    await this.times();
    release();
    const order = this.nearestFirst(ids); // the reader may have scrolled meanwhile
    // Every plot's width in the layout that nearestFirst made: drawing one chart changes the
    // layout, and reading a width after that would lay the page out again, once per chart.
    for (const id of order) this.charts.get(id).sizeHint = this.charts.get(id).plot.clientWidth;
    for (const id of order) {
      const chart = this.charts.get(id);
      const timed = chart instanceof TimeChart;
      const answers = this.sources.map((s, i) => {
        const series = timed ? timeAsSteps(bodies[i].time[chart.key]) : bodies[i].series[chart.key] || emptySeries();
        const stored = this.counts.get(id)?.get(s.runId) ?? series.step.length;
        return { series, downsampled: stored > series.step.length };
      });
      await chart.accept(answers);
      if (performance.now() - this.slice > DRAW_SLICE_MS) {
        await yieldToPage();
        this.slice = performance.now();
      }
    }
  }

  // A section's element, created in page order. The system section is collapsed until the
  // reader opens it (its charts made a run page 7,000 px tall, issue 24); the choice is kept.
  part(section) {
    let part = this.root.querySelector(`:scope > [data-section="${section}"]`);
    if (part) return part;
    const title = h("h3", { class: "section-title" }, SECTIONS[section]);
    if (section === "system") {
      part = h("details", { class: "chart-section", dataset: { section }, "aria-label": SECTIONS[section], open: prefs.get(SYSTEM_OPEN, false) },
        h("summary", { class: "section-summary" }, title));
      part.addEventListener("toggle", () => {
        prefs.set(SYSTEM_OPEN, part.open);
        if (!part.open) return;
        this.queue.push(...this.deferred.splice(0));
        this.pump();
      });
    } else {
      part = h("section", { class: "chart-section", dataset: { section }, "aria-label": SECTIONS[section] }, title);
    }
    const order = Object.keys(SECTIONS);
    const later = [...this.root.children].find((el) => order.indexOf(el.dataset.section) > order.indexOf(section));
    this.root.insertBefore(part, later || null);
    return part;
  }

  // The group's chart container in its section.
  group(section, name, first = false) {
    const part = this.part(section);
    const id = `group-${slug(`${section}-${name}`)}`;
    let group = part.querySelector(`#${id}`);
    if (!group) {
      group = h("details", { class: "group", id, open: true, dataset: { name } },
        h("summary", {}, h("h4", {}, name), " ", h("span", { class: "count muted" })), h("div", { class: "charts" }));
      const groups = [...part.querySelectorAll(":scope > .group")];
      const later = first ? groups[0] : groups.find((el) => !el.id.startsWith("group-train-rewards") && el.dataset.name > name);
      part.insertBefore(group, later || null);
    }
    return group.querySelector(".charts");
  }

  // When each run's steps happened (its Timeline), read the first time the settings' axis is a
  // time: a step axis (the default) needs none, and a read of 20 runs' timelines is not free.
  times() {
    if (settings.xAxis === "step" && this.timelines === null) return Promise.resolve();
    this.timelines ??= Promise.all(this.sources.map((s) => s.timeline.load().catch(() => {})));
    return this.timelines;
  }

  // Every drawn chart again (after a settings change); time axes need the timelines first.
  async redraw() {
    await this.times();
    for (const chart of [...this.charts.values(), this.bands].filter(Boolean)) {
      if (!chart.loaded) continue;
      chart.render();
      await yieldToPage();
    }
  }

  // Newer anchors for time axes of live runs (steps past the last anchor are extrapolated
  // until then).
  refreshTimelines() {
    if (this.timelines === null) return Promise.resolve(); // not read yet: read when needed
    this.timelines = Promise.all(this.sources.map((s) => s.timeline.load().catch(() => {})));
    return this.timelines;
  }

  // {key: series} of one run, as the API returns them (`series`, or `time` with axis "time").
  append(runId, seriesByKey, axis = "step") {
    for (const [key, series] of Object.entries(seriesByKey)) {
      this.charts.get(chartId(key, axis))?.append(runId, axis === "time" ? timeAsSteps(series) : series);
    }
  }

  // The last step (or time) drawn by chart `id` for `runId`, or -1 when it is not loaded yet.
  lastStep(id, runId) {
    const chart = this.charts.get(id);
    return chart?.loaded ? chart.lastStep(runId) : -1;
  }

  isLoaded(id) {
    return Boolean(this.charts.get(id)?.loaded);
  }

  setMarker(step) {
    this.marker = step;
    for (const chart of this.charts.values()) chart.setMarker(step);
    this.bands?.setMarker(step);
  }
}
