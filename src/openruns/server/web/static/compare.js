// The compare page: pick runs (search by name), and every metric key any of them logged is
// charted once, with one line (and min/max band) per run in that run's colour (the same on
// every chart; legends say name and short id), and the reward bands of their episodes. The
// choice lives in the URL (?runs=a,b), so a comparison can be shared. Of a run with more than
// 500 keys, its 40 most recently logged are charted (keys.js). Live like the run page:
// the points past the last step drawn, per running run, every POLL_MS.

import {
  api, h, poll, revealFirstReads, runLabel, runTitle, showError, statusBadge, timeCell, View,
} from "./common.js";
import { COLORS, runColors, settingsBar } from "./charts.js";
import { ChartGrid, RUNS_PER_READ } from "./grid.js";
import { ALL_KEYS, CHARTED, firstKeys } from "./keys.js";

const POLL_MS = 3000;
const BAND_STEPS = 10; // the newest steps read for rewards: two with one, and the bands are drawn
const AFTER_FINISH_S = 90;
const IDS_PER_LISTING = 50; // run ids of one listing: 50 of 64 characters fit its filter's 4,096

const el = (id) => document.getElementById(id);
const state = { runs: [], grid: null };

function chosenIds() {
  const text = new URLSearchParams(location.search).get("runs") || "";
  return [...new Set(text.split(",").map((s) => s.trim()).filter(Boolean))];
}

function writeUrl() {
  const ids = state.runs.map((r) => encodeURIComponent(r.id)).join(",");
  history.replaceState(null, "", ids ? `/compare?runs=${ids}` : "/compare");
}

function colors() {
  return runColors(state.runs.map((r) => r.id));
}

// A swatch takes its colour from a class (no inline style, so a strict CSP can apply).
function swatch(color) {
  return h("span", { class: `swatch c${COLORS.indexOf(color)}`, "aria-hidden": "true" });
}

function renderChosen() {
  const palette = colors();
  el("chosen").replaceChildren(...state.runs.map((run) => h("li", { class: "chip", dataset: { runId: run.id } },
    swatch(palette.get(run.id)),
    h("a", { href: `/runs/${encodeURIComponent(run.id)}` }, runLabel(run)), " ", statusBadge(run.status),
    h("button", { type: "button", class: "link", "aria-label": `remove ${runTitle(run)}`, onclick: () => remove(run.id) }, "✕"))));
  el("compare-empty").hidden = state.runs.length >= 2;
}

// A fresh grid for the chosen runs: charts of the union of their keys.
async function rebuild() {
  renderChosen();
  writeUrl();
  const root = el("chart-groups");
  root.replaceChildren();
  state.grid?.dispose();
  state.grid = null;
  if (!state.runs.length) return;
  const palette = colors();
  state.grid = new ChartGrid(root, state.runs.map((run) => ({ runId: run.id, label: runLabel(run), color: palette.get(run.id), kind: run.kind, start: run.created_at })));
  const grid = state.grid;
  const keys = await chartedKeys(state.runs);
  if (grid !== state.grid) return; // rebuilt meanwhile, for other runs
  const charted = refresh(keys); // the grid's series reads are asked for first
  // A reward band (at the top) when a run's newest steps have rewards: read after the series
  // were asked for, so that its 20 reads queue behind them, not before.
  const bands = Promise.all(state.runs.map((run) => api(`/runs/${encodeURIComponent(run.id)}/steps`, { order: "desc", limit: BAND_STEPS })))
    .then((steps) => {
      if (grid === state.grid && steps.some((rows) => rows.filter((row) => row.step !== null && row.avg_reward !== null).length > 1)) grid.addBands();
    });
  await Promise.all([charted, bands]);
}

// The keys charted of each run, in one read of every run's recent keys (of RUNS_PER_READ runs
// at most, the server's bound): of a run of more keys than one page gives (issue 21), its
// CHARTED most recent.
async function chartedKeys(runs) {
  const reads = [];
  for (let i = 0; i < runs.length; i += RUNS_PER_READ) {
    const ids = runs.slice(i, i + RUNS_PER_READ).map((run) => run.id).join(",");
    reads.push(api("/metrics/keys", { runs: ids, order: "recent", limit: ALL_KEYS }));
  }
  const pages = Object.assign({}, ...(await Promise.all(reads)).map((body) => body.runs));
  return runs.map((run) => {
    const page = pages[run.id];
    return page.next_cursor ? firstKeys(page.items, CHARTED) : page.items;
  });
}

// Keys of every chosen run (`keys`: read already, for these runs); new points of the running
// ones.
async function refresh(keys = null) {
  const { grid, runs } = state;
  if (!grid) return;
  const perRun = keys ?? await chartedKeys(runs);
  if (grid !== state.grid) return; // rebuilt meanwhile, for other runs
  runs.forEach((run, i) => grid.setKeys(perRun[i], run.id));
  await Promise.all(runs.map(async (run, i) => {
    const fresh = perRun[i].filter((row) => grid.isLoaded(row.key) && row.last_step > grid.lastStep(row.key, run.id));
    if (!fresh.length) return;
    const after = Math.min(...fresh.map((row) => grid.lastStep(row.key, run.id))) + 1;
    const width = grid.charts.get(fresh[0].key).width();
    const body = await api(`/runs/${encodeURIComponent(run.id)}/metrics`, {
      keys: fresh.map((row) => row.key).join(","), step_min: after, max_points: width,
    });
    grid.append(run.id, body.series);
  }));
}

// The runs of `ids` in the order given, read in listings of `id in (...)` (one for up to
// IDS_PER_LISTING runs, not a read each); an id no run has is left out.
async function readRuns(ids) {
  const listings = [];
  for (let i = 0; i < ids.length; i += IDS_PER_LISTING) {
    const some = ids.slice(i, i + IDS_PER_LISTING);
    listings.push(api("/runs", { filter: `id in (${some.map((id) => JSON.stringify(id)).join(",")})`, limit: some.length }));
  }
  const byId = new Map((await Promise.all(listings)).flatMap((body) => body.items).map((run) => [run.id, run]));
  return ids.filter((id) => byId.has(id)).map((id) => byId.get(id));
}

async function add(id) {
  if (state.runs.some((r) => r.id === id)) return;
  state.runs.push(await api(`/runs/${encodeURIComponent(id)}`));
  await rebuild();
}

function remove(id) {
  state.runs = state.runs.filter((r) => r.id !== id);
  rebuild().catch(showError);
}

// The runs offered are the newest search's (issue 24: an answer for what was typed before
// never replaces it).
const pickView = new View();

async function search() {
  const body = await api("/runs", { name: el("pick-name").value.trim(), limit: 10 }, { read: pickView.begin() });
  const chosen = new Set(state.runs.map((r) => r.id));
  el("pick-results").replaceChildren(...body.items.filter((run) => !chosen.has(run.id)).map((run) => h("li", {},
    h("button", { type: "button", onclick: () => add(run.id).then(search).catch(showError) }, `Add ${runTitle(run)}`),
    " ", statusBadge(run.status), " ", h("span", { class: "muted" }, run.kind, " · ", run.model || "no model", " · "),
    timeCell(run.created_at))));
}

async function main() {
  el("chart-settings").append(settingsBar());
  try {
    const ids = chosenIds();
    state.runs = await readRuns(ids);
    const missing = ids.filter((id) => !state.runs.some((run) => run.id === id));
    if (missing.length) showError(new Error(`No run ${missing.map((id) => `'${id}'`).join(", ")}`));
    await rebuild();
  } catch (error) {
    el("chosen").replaceChildren(); // not "Reading the runs…" any more
    revealFirstReads(); // the page as it is, under the error's banner
    throw error;
  }
  let timer = null;
  el("pick").addEventListener("submit", (e) => e.preventDefault());
  el("pick-name").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => search().catch(showError), 200);
  });
  // The search box, the runs offered and the charts are shown once the chosen runs' chips
  // and the offer are in (the chips moved them down by ~200 px for 20 runs).
  await search().finally(revealFirstReads);
  poll(async () => {
    const now = Date.now() / 1000;
    const live = state.runs.some((r) => r.status === "running" || now - (r.finished_at || 0) < AFTER_FINISH_S);
    if (!live) return true; // nothing to follow now; a run added later may be
    const fresh = new Map((await readRuns(state.runs.map((r) => r.id))).map((run) => [run.id, run]));
    // Runs added or removed while these reads were out stay added or removed: update in place.
    state.runs = state.runs.map((r) => fresh.get(r.id) || r);
    renderChosen();
    await refresh();
    return true;
  }, POLL_MS);
}

main().catch(showError);
