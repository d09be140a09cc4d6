// Metric charts on Plotly (the global `Plotly`: its cartesian bundle, vendored in static/vendor).
//
// SeriesChart draws one metric key for one or more runs ("sources"). It asks the server for at
// most as many points as the plot is wide (max_points); when the server had to bucket the
// steps, each bucket's min and max are drawn as a band around the line, so a spike inside a
// bucket still shows. Zooming in asks for just the visible steps at the same width, so detail
// comes back; double-click (autorange) reloads the whole range. Live points are appended with
// append(), and a chart that has grown past twice its width is reloaded at its width.
//
// Every chart follows the page's chart settings (kept in this browser): EMA smoothing, with
// the raw series drawn faint behind; a log y axis; the x axis by step, wall time or time
// since the run started (a step's time is interpolated between the run's /timeline anchors).
// A chart can instead be drawn against another metric (its x key): a metric defined with a
// step metric (W&B's define_metric(name, step_metric=K), or the native run.define_metric) is
// drawn against K by default, and the chart's "x" menu picks any metric of the run (issue 19);
// each point's x is that metric's value at the point's step (interpolated between its steps).
//
// TimeChart draws a key's rows logged without a step (time-keyed: `inference/*`, `system/*`)
// against wall time (or time since the run's start), never mixed with step charts.
//
// ChartGrid lays charts out in sections (metrics by step, eval metrics by step, rows logged
// without a step, system), each in groups by key prefix ("train/loss" -> "train"), and loads
// every chart at once, several keys per request, drawing them one after another without blocking
// the page, those in view first: nothing waits to be scrolled to. BandChart draws the p10-p90 band and median of
// the episodes' rewards per step.

import { api, formatTime, h, prefs } from "./common.js";
import { ValueTable } from "./values.js";

export const COLORS = [
  "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
  "#17becf", "#8c564b", "#e377c2", "#3f51b5", "#bcbd22",
];

// Plotly's bundle loads async (pages.py); charts draw once it has run. A page that draws its
// chart after its table (the step page) names the bundle in <meta name="plotly"> instead, and
// loadPlotly() fetches it when asked: its evaluation (0.4-0.8 s of main thread here) then does
// not hold up the table.
let plotlyLoading = null;
export function loadPlotly() {
  plotlyLoading ??= new Promise((resolve, reject) => {
    if (window.Plotly) return resolve();
    let script = document.getElementById("plotly");
    if (!script) {
      const src = document.querySelector('meta[name="plotly"]')?.content;
      if (!src) return reject(new Error("this page has no charts"));
      script = h("script", { id: "plotly", src, async: true });
      document.head.append(script);
    }
    script.addEventListener("load", () => resolve());
    script.addEventListener("error", () => reject(new Error("could not load Plotly's bundle")));
  });
  return plotlyLoading;
}

const MARGIN = { l: 56, r: 12, t: 30, b: 34 };
const ZOOM_DEBOUNCE_MS = 150;
const KEYS_PER_READ = 8; // metric keys asked for in one request while the grid loads
const READS_IN_FLIGHT = 2;
const TIMELINE_POINTS = 400;
const SYSTEM_OPEN = "charts.systemOpen"; // the system section's open state, kept in this browser

// -- colours --------------------------------------------------------------------------------

function hash(text) {
  let h32 = 0x811c9dc5; // FNV-1a
  for (let i = 0; i < text.length; i++) {
    h32 ^= text.charCodeAt(i);
    h32 = Math.imul(h32, 0x01000193);
  }
  return h32 >>> 0;
}

// A colour per run, the same on every chart and page: its id picks a palette slot; runs shown
// together that pick the same slot take the next free one, in the order given.
export function runColors(ids) {
  const taken = new Set();
  const out = new Map();
  for (const id of ids) {
    let slot = hash(id) % COLORS.length;
    for (let i = 0; i < COLORS.length && taken.has(slot); i++) slot = (slot + 1) % COLORS.length;
    taken.add(slot);
    out.set(id, COLORS[slot]);
  }
  return out;
}

function hexToRgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

// Plotly reads titles, legend names and hover labels as its own small HTML: a metric key or a
// run name is data, so its markup characters are escaped.
function plotlyText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

// -- settings -------------------------------------------------------------------------------

const DEFAULTS = { smoothing: 0, logY: false, xAxis: "step" };
const X_AXES = { step: "step", wall: "wall time", relative: "time since start" };

export const settings = { ...DEFAULTS, ...prefs.get("charts", {}) };
const listeners = new Set();

function changeSettings(changes) {
  Object.assign(settings, changes);
  prefs.set("charts", settings);
  for (const listener of listeners) listener();
}

// The controls of the page's chart settings.
export function settingsBar() {
  const smoothing = h("input", { type: "range", id: "smoothing", min: "0", max: "0.99", step: "0.01", value: String(settings.smoothing) });
  const shown = h("output", { for: "smoothing", id: "smoothing-value" }, settings.smoothing.toFixed(2));
  smoothing.addEventListener("input", () => {
    shown.textContent = Number(smoothing.value).toFixed(2);
    changeSettings({ smoothing: Number(smoothing.value) });
  });
  const log = h("input", { type: "checkbox", id: "log-y", checked: settings.logY });
  log.addEventListener("change", () => changeSettings({ logY: log.checked }));
  const axis = h("select", { id: "x-axis" }, Object.entries(X_AXES).map(([value, label]) => h("option", { value }, label)));
  axis.value = settings.xAxis;
  axis.addEventListener("change", () => changeSettings({ xAxis: axis.value }));
  return h("div", { class: "chart-settings filters" },
    h("label", {}, "Smoothing (EMA)", h("span", { class: "inline" }, smoothing, shown)),
    h("label", { class: "check" }, log, " log scale (y)"),
    h("label", {}, "X axis", axis));
}

// Exponential moving average, debiased at the start (as TensorBoard draws it); gaps stay gaps.
export function ema(values, weight) {
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - weight ** n);
  });
}

// -- time axes ------------------------------------------------------------------------------

// When each step of a run happened: anchors read from /timeline, interpolated between (and
// extended past the ends at the nearest segment's rate).
export class Timeline {
  constructor(runId) {
    this.runId = runId;
    this.steps = [];
    this.ts = [];
    this.loading = null;
  }

  load() {
    this.loading ??= api(`/runs/${encodeURIComponent(this.runId)}/timeline`, { points: TIMELINE_POINTS })
      .then((body) => {
        this.steps = body.step;
        this.ts = body.ts;
      })
      .finally(() => { this.loading = null; });
    return this.loading;
  }

  get known() {
    return this.steps.length > 0;
  }

  get origin() {
    return this.ts[0];
  }

  // Epoch seconds of a step.
  time(step) {
    return interpolate(this.steps, this.ts, step);
  }

  // The step at epoch seconds `t`.
  step(t) {
    return interpolate(this.ts, this.steps, t);
  }
}

function interpolate(xs, ys, x) {
  const n = xs.length;
  if (n === 1) return ys[0];
  let i = 1;
  let lo = 1;
  let hi = n - 1;
  while (lo <= hi) { // first anchor at or after x, within [1, n - 1]
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid + 1;
    else { i = mid; hi = mid - 1; }
  }
  if (lo > n - 1) i = n - 1;
  const [x0, x1, y0, y1] = [xs[i - 1], xs[i], ys[i - 1], ys[i]];
  return x1 === x0 ? y0 : y0 + ((x - x0) * (y1 - y0)) / (x1 - x0);
}

// -- one chart ------------------------------------------------------------------------------

function emptySeries() {
  return { step: [], value: [], min: [], max: [] };
}

export class SeriesChart {
  // sources: [{runId, label, color, timeline}]; onStep(step) is called when a point is clicked.
  constructor(container, key, sources, { onStep, title } = {}) {
    this.container = container;
    this.key = key;
    this.title = title ?? key;
    this.sources = sources;
    this.onStep = onStep;
    this.data = new Map(sources.map((s) => [s.runId, emptySeries()]));
    this.last = new Map(); // runId -> the last step known, zoomed in or not
    this.downsampled = false;
    this.zoom = null; // [lo, hi] steps while zoomed in
    this.marker = null;
    this.loaded = false;
    this.loading = null;
    this.plot = container.querySelector(".plot");
    this.xKey = null; // a metric drawn as the x axis, or null: the chart settings' axis
    this.xData = new Map(); // runId -> the x key's series
  }

  // Draw against metric `key` (null: the settings' axis), reading it first.
  async setXKey(key) {
    this.xKey = key || null;
    this.xData.clear();
    if (this.loaded) await this.load();
  }

  // Plot-area width in pixels: the number of points worth asking for.
  width() {
    return Math.max(50, Math.round(this.plot.clientWidth - MARGIN.l - MARGIN.r));
  }

  async fetch(runId, params, key = this.key) {
    const body = await api(`/runs/${encodeURIComponent(runId)}/metrics`, {
      keys: key,
      max_points: this.width(),
      ...params,
    });
    return { series: body.series[key] || emptySeries(), downsampled: body.downsampled };
  }

  // Data read elsewhere (the grid's batched reads of the whole range).
  async accept(answers) {
    await loadPlotly();
    answers.forEach((answer, i) => this.take(this.sources[i].runId, answer.series));
    this.downsampled = answers.some((a) => a.downsampled);
    if (this.xKey) {
      const range = this.rangeParams();
      const xs = await Promise.all(this.sources.map((s) => this.fetch(s.runId, range, this.xKey)));
      xs.forEach((answer, i) => this.xData.set(this.sources[i].runId, answer.series));
    }
    this.loaded = true;
    this.render();
  }

  take(runId, series) {
    this.data.set(runId, series);
    const steps = series.step;
    const end = steps.length ? steps[steps.length - 1] : -1;
    if (!this.zoom || !this.last.has(runId)) this.last.set(runId, end);
  }

  // The whole range (or the zoomed one) at the chart's width. Asked again while a read is in
  // flight (a zoom during a live reload), it reads once more after it, for the latest range.
  async load() {
    if (this.loading) {
      this.again = true;
      return this.loading;
    }
    this.loading = (async () => {
      const range = this.rangeParams();
      const answers = await Promise.all(this.sources.map((s) => this.fetch(s.runId, range)));
      await this.accept(answers);
    })();
    try {
      await this.loading;
    } finally {
      this.loading = null;
    }
    if (this.again) {
      this.again = false;
      await this.load();
    }
  }

  rangeParams() {
    return this.zoom ? { step_min: this.zoom[0], step_max: this.zoom[1] } : {};
  }

  // What hovering a point says of its x: its step.
  hoverX() {
    return { customdata: (s) => s.step, text: "step %{customdata}" };
  }

  // The last step this chart knows of (drawn, or past the zoomed-in range): where live reads
  // start from.
  lastStep(runId) {
    return this.last.get(runId) ?? -1;
  }

  // Live points of one source (series as the API returns it); only steps past the last one
  // known are taken, and while zoomed in only those inside the zoomed range are drawn.
  append(runId, series) {
    if (!this.loaded || !series || !this.data.has(runId)) return;
    const mine = this.data.get(runId);
    const last = this.lastStep(runId);
    let added = 0;
    series.step.forEach((step, i) => {
      if (step <= last) return;
      this.last.set(runId, Math.max(this.lastStep(runId), step));
      if (this.zoom && (step < this.zoom[0] || step > this.zoom[1])) return;
      mine.step.push(step);
      mine.value.push(series.value[i]);
      mine.min.push(series.min[i]);
      mine.max.push(series.max[i]);
      added += 1;
    });
    if (!added) return;
    // Against another metric, its values at the new steps are read with them.
    if (this.xKey || (!this.zoom && mine.step.length > 2 * this.width())) this.load();
    else this.render();
  }

  setMarker(step) {
    this.marker = step;
    if (this.loaded) Plotly.relayout(this.plot, { shapes: this.shapes() });
  }

  // x values of steps on the chosen axis (steps when no times are known for the run).
  xs(source, steps) {
    if (this.xKey) {
      const along = this.xData.get(source.runId);
      if (!along?.step.length) return steps.map(() => null);
      return steps.map((s) => interpolate(along.step, along.value, s));
    }
    const timeline = source.timeline;
    if (settings.xAxis === "step" || !timeline?.known) return steps;
    if (settings.xAxis === "wall") return steps.map((s) => new Date(timeline.time(s) * 1000));
    const scale = this.timeScale().seconds;
    return steps.map((s) => (timeline.time(s) - timeline.origin) / scale);
  }

  // The unit of the relative-time axis: minutes or hours when the runs ran that long.
  timeScale() {
    let span = 0;
    for (const source of this.sources) {
      const t = source.timeline;
      if (t?.known) span = Math.max(span, t.ts[t.ts.length - 1] - t.origin);
    }
    if (span > 3 * 3600) return { seconds: 3600, unit: "hours" };
    if (span > 120) return { seconds: 60, unit: "minutes" };
    return { seconds: 1, unit: "seconds" };
  }

  timed() {
    return !this.xKey && settings.xAxis !== "step" && this.sources.some((s) => s.timeline?.known);
  }

  xTitle() {
    if (this.xKey) return this.xKey;
    if (!this.timed()) return settings.xAxis === "step" ? "step" : "step (no times logged)";
    return settings.xAxis === "wall" ? "wall time" : `${this.timeScale().unit} since start`;
  }

  shapes() {
    if (this.marker === null) return [];
    const source = this.sources[0];
    const x = this.xs(source, [this.marker])[0];
    return [{
      type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1,
      line: { color: "#333", width: 1, dash: "dot" },
    }];
  }

  traces() {
    const traces = [];
    const smoothing = settings.smoothing;
    for (const source of this.sources) {
      const s = this.data.get(source.runId);
      const x = this.xs(source, s.step);
      const label = plotlyText(source.label);
      const banded = s.min.some((v, i) => v !== s.max[i]);
      if (banded) {
        // The band's edges are drawn too: a spike one bucket wide is a line, not a sliver.
        const edge = { width: 1, color: hexToRgba(source.color, smoothing ? 0.25 : 0.45) };
        traces.push({
          x, y: s.max, mode: "lines", line: edge, showlegend: false, meta: "max",
          legendgroup: source.runId, hovertemplate: `${label} max %{y:.4g}<extra></extra>`,
        });
        traces.push({
          x, y: s.min, mode: "lines", line: edge, fill: "tonexty",
          fillcolor: hexToRgba(source.color, smoothing ? 0.1 : 0.18), showlegend: false, meta: "min",
          legendgroup: source.runId, hovertemplate: `${label} min %{y:.4g}<extra></extra>`,
        });
      }
      const at = this.hoverX();
      const custom = at.customdata(s, source);
      const raw = {
        x, y: s.value, name: label, meta: "value", legendgroup: source.runId,
        mode: s.step.length <= 60 ? "lines+markers" : "lines",
        line: { color: source.color, width: 1.6 }, marker: { size: 4, color: source.color },
        customdata: custom, hovertemplate: `${label}: %{y:.4g} (${at.text})<extra></extra>`,
      };
      if (!smoothing) {
        traces.push(raw);
        continue;
      }
      // The raw series stays, faint, behind its smoothed line.
      traces.push({
        ...raw, showlegend: false, opacity: 0.3, line: { color: source.color, width: 1 },
        hovertemplate: `${label} raw %{y:.4g}<extra></extra>`,
      });
      traces.push({
        x, y: ema(s.value, smoothing), name: label, meta: "smoothed", legendgroup: source.runId, mode: "lines",
        line: { color: source.color, width: 2 }, customdata: custom,
        hovertemplate: `${label} smoothed: %{y:.4g} (${at.text})<extra></extra>`,
      });
    }
    return traces;
  }

  // Plotly centres a constant series on a range of ±1, which flattens 1e-6 into 0: give it
  // a range of its own size instead.
  flatRange() {
    if (settings.logY) return undefined;
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of this.data.values()) {
      for (const v of [...s.min, ...s.max]) {
        if (v === null) continue;
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
    }
    if (!Number.isFinite(lo) || lo !== hi) return undefined;
    const pad = Math.abs(lo) * 0.5 || 1;
    return [lo - pad, hi + pad];
  }

  xType() {
    return settings.xAxis === "wall" && this.timed() ? "date" : "linear";
  }

  render() {
    const layout = {
      title: { text: plotlyText(this.title), font: { size: 13 }, x: 0, xanchor: "left", xref: "paper" },
      margin: MARGIN,
      height: 260,
      hovermode: "x unified",
      showlegend: this.sources.length > 1,
      legend: { orientation: "h", y: -0.2 },
      xaxis: {
        title: { text: this.xTitle(), standoff: 4 }, zeroline: false,
        type: this.xType(),
      },
      yaxis: {
        zeroline: false, automargin: true, exponentformat: "e", range: this.flatRange(),
        type: settings.logY ? "log" : "linear",
      },
      shapes: this.shapes(),
      // Keep the user's zoom across live updates, until an axis setting changes.
      uirevision: `${this.key} ${this.xKey || settings.xAxis} ${settings.logY}`,
      paper_bgcolor: "#fff",
      plot_bgcolor: "#fff",
      font: { color: "#1f2328" },
    };
    const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
    const first = !this.plot.classList.contains("js-plotly-plot");
    Plotly.react(this.plot, this.traces(), layout, config);
    if (first) this.listen();
    const counts = this.sources.map((s) => this.data.get(s.runId).step.length);
    this.container.dataset.points = counts.join(",");
    this.container.dataset.downsampled = String(this.downsampled);
    this.container.dataset.x = this.xKey || settings.xAxis;
    this.container.dataset.drawn = "true";
  }

  // The step of a clicked point (the step marker), or null.
  clickedStep(point) {
    const step = point?.customdata ?? point?.x;
    return Number.isFinite(step) ? step : null;
  }

  listen() {
    let timer = null;
    this.plot.on("plotly_relayout", (event) => {
      let range = null;
      if (event["xaxis.autorange"]) range = "all";
      else if (event["xaxis.range[0]"] !== undefined) {
        range = [event["xaxis.range[0]"], event["xaxis.range[1]"]];
      } else if (Array.isArray(event["xaxis.range"])) range = event["xaxis.range"];
      if (range === null) return;
      clearTimeout(timer);
      timer = setTimeout(() => this.zoomTo(range === "all" ? range : this.stepRange(range)), ZOOM_DEBOUNCE_MS);
    });
    this.plot.on("plotly_click", (event) => {
      const step = this.clickedStep(event.points?.[0]);
      if (this.onStep && step !== null) this.onStep(step);
    });
  }

  // A zoomed x range as steps (the widest over the sources when the axis is a time).
  stepRange([a, b]) {
    if (!this.timed()) return [Number(a), Number(b)];
    const toSeconds = (x, timeline) => (settings.xAxis === "wall"
      ? new Date(x).getTime() / 1000 : x * this.timeScale().seconds + timeline.origin);
    let lo = Infinity;
    let hi = -Infinity;
    for (const { timeline } of this.sources) {
      if (!timeline?.known) continue;
      lo = Math.min(lo, timeline.step(toSeconds(a, timeline)));
      hi = Math.max(hi, timeline.step(toSeconds(b, timeline)));
    }
    return [lo, hi];
  }

  // A finer read of the visible steps, or the whole range again for "all". Nothing to do
  // when every point is already drawn.
  async zoomTo(range) {
    if (range === "all") {
      if (!this.zoom) return;
      this.zoom = null;
      return this.load();
    }
    const lo = Math.max(0, Math.floor(range[0]));
    const hi = Math.max(lo, Math.ceil(range[1]));
    const wasDownsampled = this.downsampled;
    this.zoom = [lo, hi];
    if (wasDownsampled) await this.load();
  }
}

// Time-keyed series in the shape step series have: their timestamps where the steps are.
export function timeAsSteps(series) {
  return series ? { step: series.ts, value: series.value, min: series.min, max: series.max } : emptySeries();
}

const NO_STEPS = "9223372036854775807"; // step_min past every step: a read of time-keyed rows only

// One key's rows logged without a step, against wall time, or time since the run started
// (the chart settings' "time since start"; a step axis shows wall time here).
export class TimeChart extends SeriesChart {
  async fetch(runId, params) {
    const body = await api(`/runs/${encodeURIComponent(runId)}/metrics`, {
      keys: this.key, max_points: this.width(), step_min: NO_STEPS, ...params,
    });
    return { series: timeAsSteps(body.time[this.key]), downsampled: body.downsampled };
  }

  rangeParams() {
    return this.zoom ? { ts_min: this.zoom[0], ts_max: this.zoom[1] } : {};
  }

  hoverX() {
    return { customdata: (s) => s.step.map((t) => formatTime(t)), text: "%{customdata}" };
  }

  clickedStep() {
    return null;
  }

  shapes() {
    return [];
  }

  setMarker() {} // steps are not on a time axis

  timed() {
    return true;
  }

  relative() {
    return settings.xAxis === "relative";
  }

  // When a source's clock starts: its run's start, else its first row.
  origin(source) {
    return source.start ?? this.data.get(source.runId).step[0] ?? 0;
  }

  xs(source, ts) {
    if (!this.relative()) return ts.map((t) => new Date(t * 1000));
    const origin = this.origin(source);
    const scale = this.timeScale().seconds;
    return ts.map((t) => (t - origin) / scale);
  }

  timeScale() {
    let span = 0;
    for (const source of this.sources) {
      const ts = this.data.get(source.runId).step;
      if (ts.length) span = Math.max(span, ts[ts.length - 1] - this.origin(source));
    }
    if (span > 3 * 3600) return { seconds: 3600, unit: "hours" };
    if (span > 120) return { seconds: 60, unit: "minutes" };
    return { seconds: 1, unit: "seconds" };
  }

  xTitle() {
    return this.relative() ? `${this.timeScale().unit} since start` : "wall time";
  }

  xType() {
    return this.relative() ? "linear" : "date";
  }

  // A zoomed x range as epoch seconds.
  stepRange([a, b]) {
    if (!this.relative()) return [new Date(a).getTime() / 1000, new Date(b).getTime() / 1000];
    const origin = this.origin(this.sources[0]);
    const scale = this.timeScale().seconds;
    return [a * scale + origin, b * scale + origin];
  }

  async zoomTo(range) {
    if (range === "all") {
      if (!this.zoom) return;
      this.zoom = null;
      return this.load();
    }
    const wasDownsampled = this.downsampled;
    this.zoom = [range[0], range[1]];
    if (wasDownsampled) await this.load();
  }
}

// p10-p90 of the episodes' rewards per step as a band, the median as a line, per run; of the
// episodes of the run's own kind (a training run's eval episodes are not training rewards).
export class BandChart extends SeriesChart {
  async fetch(runId) {
    const kind = this.sources.find((s) => s.runId === runId)?.kind;
    const body = await api(`/runs/${encodeURIComponent(runId)}/rewards/quantiles`, { max_points: this.width(), kind });
    return { series: body, downsampled: false };
  }

  async zoomTo() {} // the bands are drawn whole

  flatRange() {
    return undefined;
  }

  append() {}

  lastStep() {
    return -1;
  }

  traces() {
    const traces = [];
    for (const source of this.sources) {
      const s = this.data.get(source.runId);
      if (!s.p50) continue;
      const x = this.xs(source, s.step);
      const label = plotlyText(source.label);
      const edge = { width: 0.5, color: hexToRgba(source.color, 0.5) };
      traces.push({ x, y: s.p90, mode: "lines", line: edge, showlegend: false, meta: "p90", legendgroup: source.runId,
        hovertemplate: `${label} p90 %{y:.4g}<extra></extra>` });
      traces.push({ x, y: s.p10, mode: "lines", line: edge, fill: "tonexty", fillcolor: hexToRgba(source.color, 0.2),
        showlegend: false, meta: "p10", legendgroup: source.runId, hovertemplate: `${label} p10 %{y:.4g}<extra></extra>` });
      traces.push({ x, y: s.p50, name: label, mode: s.step.length <= 60 ? "lines+markers" : "lines", meta: "p50",
        legendgroup: source.runId, line: { color: source.color, width: 1.8 }, marker: { size: 4, color: source.color },
        customdata: s.count, hovertemplate: `${label} median %{y:.4g} of %{customdata} episodes<extra></extra>` });
    }
    return traces;
  }
}

// -- the grid -------------------------------------------------------------------------------

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
    this.marker = null;
    this.bands = null;
    this.timelines = Promise.all(this.sources.map((s) => s.timeline.load().catch(() => {})));
    this.onSettings = () => this.redraw();
    listeners.add(this.onSettings);
  }

  // Stop following the settings (the grid is being replaced).
  dispose() {
    listeners.delete(this.onSettings);
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

  // A step chart's x menu: the settings' axis, or any metric logged by step (listed when the
  // menu is opened, so keys that arrived later are there).
  xMenu(chart) {
    const select = h("select", { class: "x-key", "aria-label": `x axis of ${chart.key}` });
    const fill = () => {
      const known = new Set([...this.stepKeys, chart.xKey].filter(Boolean));
      const keys = [...known].filter((k) => k !== chart.key).sort();
      select.replaceChildren(h("option", { value: "" }, "settings axis"),
        ...keys.map((k) => h("option", { value: k }, k)));
      select.value = chart.xKey || "";
    };
    fill();
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
    await this.timelines;
    await this.bands.load();
  }

  // Read queued charts, KEYS_PER_READ keys per request per run, READS_IN_FLIGHT at a time;
  // each chart draws as soon as its data is in, one at a time, letting the page breathe.
  // The charts in view (or nearest to it, where the reader has scrolled by then) go first.
  // Charts of a closed section (system, collapsed by default) wait until it is opened.
  pump() {
    const closed = this.queue.filter((id) => this.charts.get(id).container.closest("details.chart-section:not([open])"));
    if (closed.length) {
      this.deferred.push(...closed);
      this.queue = this.queue.filter((id) => !closed.includes(id));
    }
    if (this.reading < READS_IN_FLIGHT && this.queue.length > 1) this.queue = this.nearestFirst(this.queue);
    while (this.reading < READS_IN_FLIGHT && this.queue.length) {
      const ids = this.queue.splice(0, KEYS_PER_READ);
      this.reading += 1;
      this.readKeys(ids)
        .catch((error) => {
          for (const id of ids) this.charts.get(id).plot.textContent = `could not load: ${error.message}`;
        })
        .finally(() => {
          this.reading -= 1;
          this.pump();
        });
    }
  }

  // Chart ids by their distance from the viewport now (a stable sort: page order among
  // equals); charts not laid out (in a closed group, a hidden tab) go last.
  nearestFirst(ids) {
    const distance = new Map(ids.map((id) => {
      const box = this.charts.get(id).container.getBoundingClientRect();
      if (!box.height) return [id, Number.MAX_VALUE];
      return [id, Math.max(0, box.top - innerHeight, -box.bottom)];
    }));
    return [...ids].sort((a, b) => distance.get(a) - distance.get(b));
  }

  // One read per run for several charts: step series come in `series`, rows logged without a
  // step in `time` (a read of time-keyed charts only skips the step series).
  async readKeys(ids) {
    const width = this.charts.get(ids[0]).width();
    const charts = ids.map((id) => this.charts.get(id));
    const names = [...new Set(charts.map((c) => c.key))];
    const onlyTime = charts.every((c) => c instanceof TimeChart);
    const bodies = await Promise.all(this.sources.map((s) => api(`/runs/${encodeURIComponent(s.runId)}/metrics`, {
      keys: names.join(","), max_points: width, step_min: onlyTime ? NO_STEPS : undefined,
    })));
    await this.timelines;
    for (const id of this.nearestFirst(ids)) { // the reader may have scrolled meanwhile
      const chart = this.charts.get(id);
      const timed = chart instanceof TimeChart;
      const answers = this.sources.map((s, i) => {
        const series = timed ? timeAsSteps(bodies[i].time[chart.key]) : bodies[i].series[chart.key] || emptySeries();
        const stored = this.counts.get(id)?.get(s.runId) ?? series.step.length;
        return { series, downsampled: stored > series.step.length };
      });
      await chart.accept(answers);
      await yieldToPage();
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

  // Every drawn chart again (after a settings change); time axes need the timelines first.
  async redraw() {
    await this.timelines;
    for (const chart of [...this.charts.values(), this.bands].filter(Boolean)) {
      if (!chart.loaded) continue;
      chart.render();
      await yieldToPage();
    }
  }

  // Newer anchors for time axes of live runs (steps past the last anchor are extrapolated
  // until then).
  refreshTimelines() {
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
