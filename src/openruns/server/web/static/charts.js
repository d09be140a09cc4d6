// Metric charts on Plotly (the global `Plotly`, served from the installed plotly package).
//
// SeriesChart draws one metric key for one or more runs ("sources"). It asks the server for at
// most as many points as the plot is wide (max_points); when the server had to bucket the
// steps, each bucket's min and max are drawn as a band around the line, so a spike inside a
// bucket still shows. Zooming in asks for just the visible steps at the same width, so detail
// comes back; double-click (autorange) reloads the whole range. Live points are appended with
// append(), and a chart that has grown past twice its width is reloaded at its width.
//
// ChartGrid lays charts out in groups by key prefix ("train/loss" -> "train"), creates each
// chart's plot only when it scrolls into view, and passes live points and the step marker on.

import { api } from "./common.js";

export const COLORS = [
  "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
  "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
];

// Plotly's bundle loads async (pages.py); charts draw once it has run.
const plotlyReady = new Promise((resolve, reject) => {
  const script = document.getElementById("plotly");
  if (window.Plotly || !script) resolve();
  script?.addEventListener("load", () => resolve());
  script?.addEventListener("error", () => reject(new Error("could not load Plotly's bundle")));
});

const MARGIN = { l: 56, r: 12, t: 30, b: 34 };
const ZOOM_DEBOUNCE_MS = 150;

function hexToRgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

// Plotly reads titles, legend names and hover labels as its own small HTML: a metric key or a
// run name is data, so its markup characters are escaped.
function plotlyText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function emptySeries() {
  return { step: [], value: [], min: [], max: [] };
}

export class SeriesChart {
  // sources: [{runId, label, color}]; onStep(step) is called when a point is clicked.
  constructor(container, key, sources, { onStep } = {}) {
    this.container = container;
    this.key = key;
    this.sources = sources;
    this.onStep = onStep;
    this.data = new Map(sources.map((s) => [s.runId, emptySeries()]));
    this.last = new Map(); // runId -> the last step known, zoomed in or not
    this.downsampled = false;
    this.zoom = null; // [lo, hi] while zoomed in
    this.marker = null;
    this.loaded = false;
    this.loading = null;
    this.plot = container.querySelector(".plot");
  }

  // Plot-area width in pixels: the number of points worth asking for.
  width() {
    return Math.max(50, Math.round(this.plot.clientWidth - MARGIN.l - MARGIN.r));
  }

  async fetch(runId, params) {
    const body = await api(`/runs/${encodeURIComponent(runId)}/metrics`, {
      keys: this.key,
      max_points: this.width(),
      ...params,
    });
    return { series: body.series[this.key] || emptySeries(), downsampled: body.downsampled };
  }

  // The whole range (or the zoomed one) at the chart's width. Asked again while a read is in
  // flight (a zoom during a live reload), it reads once more after it, for the latest range.
  async load() {
    if (this.loading) {
      this.again = true;
      return this.loading;
    }
    this.loading = (async () => {
      const range = this.zoom ? { step_min: this.zoom[0], step_max: this.zoom[1] } : {};
      const answers = await Promise.all(this.sources.map((s) => this.fetch(s.runId, range)));
      await plotlyReady;
      answers.forEach((answer, i) => {
        const runId = this.sources[i].runId;
        this.data.set(runId, answer.series);
        const steps = answer.series.step;
        const end = steps.length ? steps[steps.length - 1] : -1;
        if (!this.zoom || !this.last.has(runId)) this.last.set(runId, end);
      });
      this.downsampled = answers.some((a) => a.downsampled);
      this.loaded = true;
      this.render();
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
    if (!this.zoom && mine.step.length > 2 * this.width()) this.load();
    else this.render();
  }

  setMarker(step) {
    this.marker = step;
    if (this.loaded) Plotly.relayout(this.plot, { shapes: this.shapes() });
  }

  shapes() {
    if (this.marker === null) return [];
    return [{
      type: "line", x0: this.marker, x1: this.marker, yref: "paper", y0: 0, y1: 1,
      line: { color: "#333", width: 1, dash: "dot" },
    }];
  }

  traces() {
    const traces = [];
    for (const source of this.sources) {
      const s = this.data.get(source.runId);
      const banded = s.min.some((v, i) => v !== s.max[i]);
      if (banded) {
        // The band's edges are drawn too: a spike one bucket wide is a line, not a sliver.
        const edge = { width: 1, color: hexToRgba(source.color, 0.45) };
        traces.push({
          x: s.step, y: s.max, mode: "lines", line: edge, showlegend: false, meta: "max",
          legendgroup: source.runId, hovertemplate: "max %{y:.4g}<extra></extra>",
        });
        traces.push({
          x: s.step, y: s.min, mode: "lines", line: edge, fill: "tonexty",
          fillcolor: hexToRgba(source.color, 0.18), showlegend: false, meta: "min",
          legendgroup: source.runId, hovertemplate: "min %{y:.4g}<extra></extra>",
        });
      }
      traces.push({
        x: s.step, y: s.value, name: plotlyText(source.label), meta: "value", legendgroup: source.runId,
        mode: s.step.length <= 60 ? "lines+markers" : "lines",
        line: { color: source.color, width: 1.6 }, marker: { size: 4, color: source.color },
        hovertemplate: `%{y:.4g}<extra>${plotlyText(source.label)}</extra>`,
      });
    }
    return traces;
  }

  // Plotly centres a constant series on a range of ±1, which flattens 1e-6 into 0: give it
  // a range of its own size instead.
  flatRange() {
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

  render() {
    const layout = {
      title: { text: plotlyText(this.key), font: { size: 13 }, x: 0, xanchor: "left", xref: "paper" },
      margin: MARGIN,
      height: 260,
      hovermode: "x unified",
      showlegend: this.sources.length > 1,
      legend: { orientation: "h", y: -0.2 },
      xaxis: { title: { text: "step", standoff: 4 }, zeroline: false },
      yaxis: { zeroline: false, automargin: true, exponentformat: "e", range: this.flatRange() },
      shapes: this.shapes(),
      uirevision: this.key, // keep the user's zoom across live updates
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
      timer = setTimeout(() => this.zoomTo(range), ZOOM_DEBOUNCE_MS);
    });
    this.plot.on("plotly_click", (event) => {
      const step = event.points?.[0]?.x;
      if (this.onStep && Number.isFinite(step)) this.onStep(step);
    });
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

function groupOf(key) {
  const slash = key.indexOf("/");
  return slash > 0 ? key.slice(0, slash) : "(no prefix)";
}

function slug(text) {
  return text.replace(/[^A-Za-z0-9_-]+/g, "-");
}

export class ChartGrid {
  constructor(root, sources, { onStep } = {}) {
    this.root = root;
    this.sources = sources;
    this.onStep = onStep;
    this.charts = new Map(); // key -> SeriesChart
    this.marker = null;
    this.observer = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        this.observer.unobserve(entry.target);
        const chart = this.charts.get(entry.target.dataset.key);
        chart?.load().catch((error) => {
          entry.target.querySelector(".plot").textContent = `could not load: ${error.message}`;
        });
      }
    }, { rootMargin: "200px" });
  }

  // Add a chart for each key not seen yet, in its prefix group, in name order.
  setKeys(keys) {
    for (const key of [...keys].sort()) {
      if (this.charts.has(key)) continue;
      const body = this.group(groupOf(key));
      const box = document.createElement("figure");
      box.className = "chart";
      box.dataset.key = key;
      box.setAttribute("aria-label", `chart of ${key}`);
      const plot = document.createElement("div");
      plot.className = "plot";
      box.append(plot);
      const later = [...body.children].find((el) => el.dataset.key > key);
      body.insertBefore(box, later || null);
      const chart = new SeriesChart(box, key, this.sources, { onStep: this.onStep });
      chart.marker = this.marker;
      this.charts.set(key, chart);
      this.observer.observe(box);
    }
    for (const group of this.root.querySelectorAll(".group")) {
      group.querySelector(".count").textContent = `(${group.querySelector(".charts").children.length})`;
    }
  }

  group(name) {
    const id = `group-${slug(name)}`;
    let group = this.root.querySelector(`#${id}`);
    if (!group) {
      group = document.createElement("details");
      group.className = "group";
      group.id = id;
      group.open = true;
      group.dataset.name = name;
      group.innerHTML = '<summary><h3></h3> <span class="count muted"></span></summary><div class="charts"></div>';
      group.querySelector("h3").textContent = name;
      const later = [...this.root.children].find((el) => el.dataset.name > name);
      this.root.insertBefore(group, later || null);
    }
    return group.querySelector(".charts");
  }

  // {key: series} of one run, as the API returns them.
  append(runId, seriesByKey) {
    for (const [key, series] of Object.entries(seriesByKey)) this.charts.get(key)?.append(runId, series);
  }

  // The last step drawn for `key` of `runId`, or -1 when that chart is not loaded yet.
  lastStep(key, runId) {
    const chart = this.charts.get(key);
    return chart?.loaded ? chart.lastStep(runId) : -1;
  }

  isLoaded(key) {
    return Boolean(this.charts.get(key)?.loaded);
  }

  setMarker(step) {
    this.marker = step;
    for (const chart of this.charts.values()) chart.setMarker(step);
  }
}
