// Metric charts on uPlot (the global `uPlot`: its minified build, vendored in static/vendor and
// run before the page's script, pages.py). Plotly stays for the step page's histogram only.
//
// SeriesChart draws one metric key for one or more runs ("sources"). It asks the server for at
// most as many points as the plot is wide (max_points); when the server had to bucket the
// steps, each bucket's min and max are drawn as a band around the line, so a spike inside a
// bucket still shows. Dragging across the plot zooms in and asks for just the visible steps at
// the same width, so detail comes back; double-click reloads the whole range. Live points are
// appended with append(), and a chart that has grown past twice its width is reloaded at its
// width. Hovering shows each run's value and step in the legend under the plot (the legend
// names the runs in their colours; a click on a name hides or shows its line).
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
// against wall time (or time since the run's start), never mixed with step charts. BandChart
// draws the p10-p90 band and median of the episodes' rewards per step. The grid that lays
// charts out and reads their data is grid.js.
//
// A chart's plot element holds the chart as `.seriesChart`; drawn() and axes() read back what
// its uPlot instance holds (the browser tests do).

import { api, formatTime, h, prefs } from "./common.js";

export const COLORS = [
  "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
  "#17becf", "#8c564b", "#e377c2", "#3f51b5", "#bcbd22",
];

export const MARGIN = { l: 64, r: 12 }; // the y axis' width and the right padding, in pixels
const HEIGHT = 200; // of the plotting area and x axis; the title and legend add to it
const POINTS_UP_TO = 60; // a series of at most this many points is drawn with markers
// Lines are 1 px wide (uPlot's default; 2 device pixels on a HiDPI screen): a canvas without a
// GPU (headless, a VM, a remote desktop) strokes those on its fast path, where a noisy 1.6 px
// line took ~5 ms of rasterizing and 20 of them ~90 ms (issue 21). A chart of more runs than
// FEW_RUNS draws each run as its line alone, without its min/max band (twenty bands overlaid
// are a smear); of fewer, a smoothed line is drawn 2 px wide over its raw one.
const FEW_RUNS = 4;
const ZOOM_DEBOUNCE_MS = 150;
const TIMELINE_POINTS = 400;

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

// A value as hover and ticks show it: four significant digits (Plotly's %{y:.4g}).
export function formatValue(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "--";
  const abs = Math.abs(v);
  if (abs !== 0 && (abs < 1e-4 || abs >= 1e6)) return v.toExponential(3).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(4)));
}

// -- settings -------------------------------------------------------------------------------

const DEFAULTS = { smoothing: 0, logY: false, xAxis: "step" };
const X_AXES = { step: "step", wall: "wall time", relative: "time since start" };

export const settings = { ...DEFAULTS, ...prefs.get("charts", {}) };
const listeners = new Set();

// Call `listener` after every change of the settings; returns what stops that.
export function followSettings(listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

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

// Values a log axis can draw: the others (zero, negatives) are left out, as gaps.
function positive(values) {
  return values.map((v) => (v > 0 ? v : null));
}

// The y range of a chart: uPlot's, except that a constant series gets a range of its own size
// (1e-6 stays 1e-6, not a line at 0 of a range of ±1).
function yRange(u, lo, hi) {
  if (lo === null || hi === null) return [0, 1];
  if (u.scales.y.distr === 3) return uPlot.rangeLog(lo, hi, 10, true);
  if (lo === hi) {
    const pad = Math.abs(lo) * 0.5 || 1;
    return [lo - pad, hi + pad];
  }
  return uPlot.rangeNum(lo, hi, 0.1, true);
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
    this.plot.seriesChart = this;
    this.xKey = null; // a metric drawn as the x axis, or null: the chart settings' axis
    this.xData = new Map(); // runId -> the x key's series
    this.uplot = null;
    this.shape = null; // what the uPlot instance was built for: another shape builds anew
    this.sizeHint = null; // the plot's width measured by the grid with others (one layout, not one each)
    this.steps = []; // per uPlot series (index 1..), the step of each x index, for hover
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

  // What hovering a point says of its x (after the value): its step.
  hoverX(step) {
    return `step ${step}`;
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
    if (this.uplot) this.uplot.redraw(false);
  }

  // x values of steps on the chosen axis (steps when no times are known for the run); wall
  // times are epoch seconds (uPlot's time scale).
  xs(source, steps) {
    if (this.xKey) {
      const along = this.xData.get(source.runId);
      if (!along?.step.length) return steps.map(() => null);
      return steps.map((s) => interpolate(along.step, along.value, s));
    }
    const timeline = source.timeline;
    if (settings.xAxis === "step" || !timeline?.known) return steps;
    if (settings.xAxis === "wall") return steps.map((s) => timeline.time(s));
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

  xType() {
    return settings.xAxis === "wall" && this.timed() ? "date" : "linear";
  }

  // The x of the step marker, or null.
  markerX() {
    if (this.marker === null) return null;
    return this.xs(this.sources[0], [this.marker])[0];
  }

  // The lines of one source: [{meta, values}] beside its steps and xs, in drawing order.
  lines(s) {
    const lines = [];
    const log = settings.logY;
    const y = (values) => (log ? positive(values) : values);
    if (this.sources.length <= FEW_RUNS && s.min.some((v, i) => v !== s.max[i])) {
      lines.push({ meta: "max", values: y(s.max) }, { meta: "min", values: y(s.min) });
    }
    lines.push({ meta: "value", values: y(s.value) });
    if (settings.smoothing) lines.push({ meta: "smoothed", values: y(ema(s.value, settings.smoothing)) });
    return lines;
  }

  // uPlot's data (x, then one array per line, aligned on the union of the sources' xs) and
  // series options; steps[i] holds series i's step at each x.
  build() {
    const tables = [];
    const series = [{ label: this.xTitle(), value: (u, x) => this.formatX(x) }];
    const bands = [];
    const steps = [null];
    const smoothing = settings.smoothing;
    for (const source of this.sources) {
      const s = this.data.get(source.runId);
      if (!s.step) continue;
      const xs = this.xs(source, s.step);
      // uPlot needs xs ascending: a metric as the x axis may not be (its points are sorted).
      let order = s.step.map((_, i) => i).filter((i) => xs[i] !== null && Number.isFinite(xs[i]));
      if (order.some((i, n) => n && xs[i] < xs[order[n - 1]])) order.sort((a, b) => xs[a] - xs[b]);
      const dedup = order.filter((i, n) => !n || xs[i] !== xs[order[n - 1]]);
      const pick = (values) => dedup.map((i) => values[i] ?? null);
      const lines = this.lines(s);
      tables.push([pick(xs), pick(s.step), ...lines.map((line) => pick(line.values))]);
      const few = dedup.length <= POINTS_UP_TO;
      for (const line of lines) {
        const index = series.length;
        const common = { meta: line.meta, name: source.label, color: source.color, runId: source.runId, few };
        if (line.meta === "max" || line.meta === "min") {
          const edge = hexToRgba(source.color, smoothing ? 0.25 : 0.45);
          series.push({ ...common, label: `${source.label} ${line.meta}`, class: "band-edge", stroke: edge, width: 1,
            points: { show: false }, value: (u, v) => formatValue(v) });
          if (line.meta === "min") bands.push({ series: [index - 1, index], fill: hexToRgba(source.color, smoothing ? 0.1 : 0.18) });
        } else if (line.meta === "value" && smoothing) {
          series.push({ ...common, label: `${source.label} raw`, class: "raw", stroke: source.color, width: 1, alpha: 0.3,
            points: { show: few, size: 4 }, value: (u, v) => formatValue(v) });
        } else {
          const width = line.meta === "smoothed" && this.sources.length <= FEW_RUNS ? 2 : 1;
          series.push({ ...common, label: source.label, stroke: source.color, width,
            points: { show: few && line.meta === "value", size: 4, fill: source.color },
            value: (u, v, i, idx) => (v === null || v === undefined ? "--" : `${formatValue(v)} (${this.hoverX(this.steps[i][idx])})`) });
        }
      }
    }
    if (!tables.length) return { data: [[]], series: [series[0]], bands, steps };
    const joined = tables.length === 1 ? tables[0] : uPlot.join(tables);
    // Each table is [x, step, ...lines]: its step column is kept aside for hover.
    const data = [joined[0]];
    let column = 1;
    for (const table of tables) {
      const stepColumn = joined[column];
      for (let i = 2; i < table.length; i++) {
        data.push(joined[column + i - 1]);
        steps.push(stepColumn);
      }
      column += table.length - 1;
    }
    return { data, series, bands, steps };
  }

  formatX(x) {
    if (x === null || x === undefined) return "--";
    if (this.xType() === "date") return formatTime(x);
    return this.xKey || settings.xAxis === "relative" ? formatValue(x) : String(x);
  }

  options(built) {
    return {
      width: Math.max(100, this.sizeHint ?? this.plot.clientWidth),
      height: HEIGHT,
      title: this.title,
      padding: [8, MARGIN.r, 0, 0],
      scales: {
        x: { time: this.xType() === "date" },
        y: { distr: settings.logY ? 3 : 1, range: yRange },
      },
      axes: [
        { label: this.xTitle(), labelSize: 16, labelFont: "12px system-ui, sans-serif", size: 32, font: "11px system-ui, sans-serif",
          values: this.xType() === "date" ? undefined : (u, splits) => splits.map((v) => formatValue(v)) },
        { size: MARGIN.l, font: "11px system-ui, sans-serif", values: (u, splits) => splits.map((v) => formatValue(v)) },
      ],
      series: built.series,
      bands: built.bands,
      cursor: { drag: { x: true, y: false, setScale: true }, points: { size: 6 } },
      legend: { show: true, live: true },
      hooks: {
        draw: [(u) => this.drawMarker(u)],
        setSelect: [(u) => this.selected(u)],
      },
    };
  }

  // The dotted line of the step marker.
  drawMarker(u) {
    const x = this.markerX();
    this.container.dataset.marker = x === null ? "" : String(x);
    if (x === null || !Number.isFinite(x)) return;
    const px = u.valToPos(x, "x", true);
    const { ctx, bbox } = u;
    if (px < bbox.left || px > bbox.left + bbox.width) return;
    ctx.save();
    ctx.strokeStyle = "#333";
    ctx.lineWidth = devicePixelRatio;
    ctx.setLineDash([3 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(px, bbox.top);
    ctx.lineTo(px, bbox.top + bbox.height);
    ctx.stroke();
    ctx.restore();
  }

  // A drag across the plot: uPlot zooms its x scale; the visible steps are read again.
  selected(u) {
    if (u.select.width < 2) return;
    this.dragged = true;
    const range = [u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")];
    clearTimeout(this.zoomTimer);
    this.zoomTimer = setTimeout(() => this.zoomTo(this.stepRange(range)), ZOOM_DEBOUNCE_MS);
  }

  listen(u) {
    u.over.addEventListener("mousedown", () => { this.dragged = false; });
    u.over.addEventListener("click", () => {
      const idx = u.cursor.idx;
      if (this.dragged || idx === null || idx === undefined || !this.onStep) return;
      const step = this.clickedStep(idx);
      if (step !== null) this.onStep(step);
    });
    u.over.addEventListener("dblclick", () => {
      clearTimeout(this.zoomTimer);
      this.zoomTo("all");
    });
    this.resizer = new ResizeObserver(() => {
      const width = this.plot.clientWidth;
      if (this.uplot && width && Math.abs(width - this.uplot.width) > 1) this.uplot.setSize({ width, height: HEIGHT });
    });
    this.resizer.observe(this.plot);
  }

  // The step of the point at x index `idx` (the step marker), or null.
  clickedStep(idx) {
    for (let i = 1; i < this.steps.length; i++) {
      const step = this.steps[i]?.[idx];
      if (Number.isFinite(step)) return step;
    }
    return null;
  }

  render() {
    const built = this.build();
    this.steps = built.steps;
    // A new uPlot when the series or axes change; new data only keeps the reader's zoom.
    const shape = JSON.stringify([built.series.map((s) => [s.label, s.meta, s.points?.show]),
      this.xTitle(), this.xType(), settings.logY]);
    if (!this.uplot || shape !== this.shape) {
      this.uplot?.destroy();
      this.resizer?.disconnect();
      this.plot.replaceChildren();
      this.shape = shape;
      this.uplot = new uPlot(this.options(built), built.data, this.plot);
      this.sizeHint = null;
      this.listen(this.uplot);
    } else {
      const x = this.uplot.scales.x;
      const zoomed = this.zoom !== null && x.min !== null;
      this.uplot.setData(built.data, !zoomed);
      if (zoomed) this.uplot.setScale("x", { min: x.min, max: x.max });
    }
    const counts = this.sources.map((s) => this.data.get(s.runId).step.length);
    this.container.dataset.points = counts.join(",");
    this.container.dataset.downsampled = String(this.downsampled);
    this.container.dataset.x = this.xKey || settings.xAxis;
    this.container.dataset.drawn = "true";
  }

  // What the chart holds, line by line: [{meta, name, color, opacity, x, y}], each line's
  // points where it has them (read back from uPlot).
  drawn() {
    const u = this.uplot;
    if (!u) return [];
    return u.series.slice(1).map((s, i) => {
      const ys = u.data[i + 1];
      const at = [...ys.keys()].filter((j) => ys[j] !== undefined);
      return { meta: s.meta, name: s.name, color: s.color, opacity: s.alpha ?? 1, width: s.width,
        x: at.map((j) => u.data[0][j]), y: at.map((j) => ys[j]), step: at.map((j) => this.steps[i + 1][j]) };
    });
  }

  // The axes as drawn: {x: {type, title, min, max}, y: {type}}.
  axes() {
    const u = this.uplot;
    return {
      x: { type: u.scales.x.time ? "date" : "linear", title: u.axes[0].label, min: u.scales.x.min, max: u.scales.x.max },
      y: { type: u.scales.y.distr === 3 ? "log" : "linear" },
    };
  }

  // A zoomed x range as steps (the widest over the sources when the axis is a time).
  stepRange([a, b]) {
    if (!this.timed()) return [Number(a), Number(b)];
    const toSeconds = (x, timeline) => (settings.xAxis === "wall" ? x : x * this.timeScale().seconds + timeline.origin);
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

  destroy() {
    this.resizer?.disconnect();
    this.uplot?.destroy();
    this.uplot = null;
  }
}

// Time-keyed series in the shape step series have: their timestamps where the steps are.
export function timeAsSteps(series) {
  return series ? { step: series.ts, value: series.value, min: series.min, max: series.max } : emptySeries();
}

export const NO_STEPS = "9223372036854775807"; // step_min past every step: a read of time-keyed rows only

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

  hoverX(ts) {
    return formatTime(ts);
  }

  clickedStep() {
    return null;
  }

  markerX() {
    return null; // steps are not on a time axis
  }

  setMarker() {}

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
    if (!this.relative()) return ts;
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

  formatX(x) {
    if (x === null || x === undefined) return "--";
    return this.relative() ? formatValue(x) : formatTime(x);
  }

  // A zoomed x range as epoch seconds.
  stepRange([a, b]) {
    if (!this.relative()) return [a, b];
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

  append() {}

  lastStep() {
    return -1;
  }

  lines(s) {
    if (!s.p50) return [];
    const y = (values) => (settings.logY ? positive(values) : values);
    return [{ meta: "p90", values: y(s.p90) }, { meta: "p10", values: y(s.p10) }, { meta: "p50", values: y(s.p50), count: s.count }];
  }

  build() {
    const built = super.build();
    // super.build() styles lines by their meta: restyle the quantiles, band between p90 and p10.
    built.bands = [];
    built.series.forEach((series, index) => {
      if (series.meta === "p90" || series.meta === "p10") {
        Object.assign(series, { label: `${series.name} ${series.meta}`, class: "band-edge", stroke: hexToRgba(series.color, 0.5),
          width: 0.5, alpha: 1, points: { show: false }, value: (u, v) => formatValue(v) });
        if (series.meta === "p10") built.bands.push({ series: [index - 1, index], fill: hexToRgba(series.color, 0.2) });
      } else if (series.meta === "p50") {
        Object.assign(series, { label: `${series.name} median`, width: 1.8, points: { show: series.few, size: 4, fill: series.color } });
      }
    });
    return built;
  }
}
