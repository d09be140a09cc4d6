// The run page, two tabs. Overview: header (status, error, loss counters), every metric charted
// in sections (by step; eval; logged without a step, by wall time; system) and by prefix, with a
// step slider and the chart settings (smoothing, log scale, x axis), the reward bands of the
// episodes, the steps that have episodes, notes, tags and group (edited here), the summary,
// what retention dropped of an old run (one line),
// the config as launched, exports, and a search box over the run's rollouts; the steps table
// reads a step as dispatched at or trained at, per kind, with its off-policy count. Logs: the
// console output of the run's processes (logs.js), a failed run's traceback first.
//
// A run of more than 500 metric keys (issue 21) charts the 40 logged at the latest steps, and
// offers the others through a search box and a "more" button (keys.js).
//
// Live while the run is running (and for a while after it finishes, while late uploads are
// still accepted): every POLL_MS it re-reads the run, the metric keys (one small row per key)
// and only the points past the last step each chart has drawn (step_min), and the steps table
// from the last step it holds on (step_min); it never downloads a history twice. The steps
// table reads the newest STEPS_PAGE steps, and older pages as more are shown ("Show more
// steps"): a run of 100,000 steps and 10M episodes costs a page, not the run (issue 21).

import {
  api, apiSend, fill, apiUrl, downloadLink, formatDuration, formatNumber, formatTime, h, linkRow, navigableRows,
  isInternalKey, pathParts, poll, revealFirstReads, rewardMeans, runDuration, runLabel, runTitle, showError, showMissing, statusBadge, timeCell, envName, View,
} from "./common.js";
import { runColors, settingsBar } from "./charts.js";
import { ChartGrid, chartId } from "./grid.js";
import { ChartedKeys, recentKeys } from "./keys.js";
import { LogsView } from "./logs.js";
import { MediaSection } from "./media.js";

const POLL_MS = 2000;
const AFTER_FINISH_S = 90; // keep polling this long after the run finished (late uploads)
const STEPS_SHOWN = 50;
const LATE_STEPS = 8; // steps re-read behind the newest one (late episodes of async RL)
const STEPS_PAGE = 500; // steps a read of /steps gives, newest first
const TIMELINE_MS = 15000; // how often a live run's step times are read again
const MEDIA_MS = 10000; // how often a live run's images and tables are listed again

const runId = pathParts()[1];
const base = `/runs/${encodeURIComponent(runId)}`;

const state = {
  run: null,
  keys: new Map(), // key -> {last_step, last_value, count}
  steps: new Map(), // step -> {count, avg_reward, off_policy}
  stepsShown: STEPS_SHOWN,
  stepsOlder: false, // steps older than those held are still to be read
  maxStep: -1,
  signature: null, // of what the header and summary were last drawn from
  linesPrinted: null, // console lines of a run that ended in an error (read once it has)
};

const grid = new ChartGrid(
  document.getElementById("chart-groups"),
  [{ runId, label: runId, color: runColors([runId]).get(runId) }],
  { onStep: (step) => selectStep(step) },
);
document.getElementById("chart-settings").append(settingsBar());
// A run of more keys than one read gives charts some of them (keys.js).
const charted = new ChartedKeys(document.getElementById("key-tools"), runId, () => {
  grid.setKeys([...charted.rows.values()]);
});
const logs = new LogsView(base);
const media = new MediaSection(document.getElementById("media"), runId);
let retention; // the run's retention record, read once it ended (undefined: not yet)
let mediaAt = null; // when the media were last listed; null: never, false: no media route

function renderHeader(run) {
  document.title = `${runTitle(run)} · openruns`;
  const facts = [
    ["Id", h("code", {}, run.id)],
    ["Kind", run.kind],
    ["Model", run.model || "—"],
    ["Framework", run.framework || "—"],
    ["Environments", (run.environments || []).map(envName).join(", ") || "—"],
    ["Tags", (run.tags || []).length ? run.tags.map((t) => [h("a", { class: "tag", href: `/?tag=${encodeURIComponent(t)}` }, t), " "]) : "—"],
    ["Group", run.group ? h("a", { href: `/?group=${encodeURIComponent(run.group)}` }, run.group) : "—"],
    ["Project", h("a", { href: `/?project=${encodeURIComponent(run.project)}` }, run.project)],
    ["Team", run.team_id],
    ["Started", formatTime(run.created_at)],
    ["Duration", h("span", { id: "duration" }, formatDuration(runDuration(run)))],
    ["Finished", run.finished_at ? formatTime(run.finished_at) : "—"],
    ["Last heartbeat", run.last_heartbeat_at ? timeCell(run.last_heartbeat_at) : "—"],
  ];
  facts.push(...wandbFacts(wandbSide));
  const training = run.training || {};
  if (training.max_steps) facts.push(["Progress", progress(state.maxStep, training.max_steps)]);
  for (const [name, value] of Object.entries(training)) {
    if (name !== "max_steps") facts.push([name[0].toUpperCase() + name.slice(1).replaceAll("_", " "), String(value)]);
  }
  const losses = run.losses || {};
  const failed = Object.entries(losses.failed_records || {}).filter(([, n]) => n);
  const lost = (losses.dropped_records || 0) + failed.reduce((a, [, n]) => a + n, 0);
  const header = document.getElementById("run-header");
  fill(header,
    h("h1", {}, runTitle(run), " ", statusBadge(run.status), " ", h("span", { class: "badge kind" }, run.kind),
      run.status === "running" ? [" ", stopButton(run)] : null, " ", deleteButton(run)),
    run.description ? h("p", { class: "description" }, run.description) : null,
    endingBox(run),
    retentionNote(retention),
    h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    lossesLine(losses, lost, failed),
  );
}

// What the run's writers could not deliver: dropped and failed records, the processes killed
// before they could count theirs (unclosed_writers), and what waits in a local spool.
function lossesLine(losses, lost, failed) {
  const unclosed = losses.unclosed_writers || 0;
  const spooled = losses.spooled_records || 0;
  const spool = losses.spool || {};
  return h("div", { class: lost || unclosed || spooled ? "losses warn" : "losses", id: "losses" },
    lost || unclosed
      ? [h("strong", {}, "Records lost: "),
        `${formatNumber(losses.dropped_records || 0)} dropped by the SDK`,
        failed.map(([reason, n]) => `; ${formatNumber(n)} failed (${reason})`),
        unclosed
          ? `; ${formatNumber(unclosed)} process${unclosed === 1 ? "" : "es"} ended without closing `
            + "the run (killed?): what they had not sent is lost and was not counted"
          : null, ". "]
      : "No records lost (0 dropped, 0 failed). ",
    spooled
      ? `${formatNumber(spooled)} records wait in a local spool`
        + (spool.dir ? ` (${spool.host ? `${spool.host}:` : ""}${spool.dir}; upload them with openruns sync)` : "")
        + "."
      : null);
}

// What retention dropped of an old run (issue 22; GET /runs/{id}/retention), in one line.
function retentionNote(record) {
  if (!record || !record.reduced || !record.episodes_dropped) return null;
  const day = new Date(record.reduced_at * 1000).toISOString().slice(0, 10);
  return h("p", { class: "note-box retention", id: "retention-note", role: "note" },
    `${formatNumber(record.episodes_dropped)} episodes dropped by retention on ${day} `
    + `(kept ${formatNumber(record.rule.keep_per_step)} per step)`);
}

// Steps count from 0: a run that logged steps 0..119 of max_steps 120 has done 120 of them.
function progress(lastStep, maxSteps) {
  const done = Math.max(0, lastStep + 1);
  const last = lastStep >= 0 ? ` (steps 0–${formatNumber(lastStep)})` : "";
  return `${formatNumber(done)} of ${formatNumber(maxSteps)} steps${last}`;
}

// How the run ended, when that needs saying: a failed or crashed run's error (red), with the
// way to its traceback when it printed anything (a Prime run reports its error in its status
// only: then the error here is all there is); a cancelled run's reason, in a neutral style:
// cancelling is not an error (issue 24).
function endingBox(run) {
  if (run.status === "cancelled") {
    return h("div", { class: "note-box cancelled", role: "status" },
      h("strong", {}, "Cancelled"),
      run.error ? h("pre", { class: "note-text" }, run.error) : h("p", { class: "muted" }, "No reason was given."));
  }
  if (!run.error && !["failed", "crashed"].includes(run.status)) return null;
  const printed = state.linesPrinted;
  return h("div", { class: "error-box", role: "alert" },
    h("strong", {}, run.status === "crashed" ? "Crashed" : "Error"),
    h("pre", { class: "error-text" }, run.error || "(no error message was reported)"),
    printed === null ? null
      : printed > 0 ? h("a", { href: "#logs", class: "to-logs" }, "The traceback and the last lines printed →")
        : h("p", { class: "no-logs" }, "The run sent no console output: this error is all it reported."));
}

function renderSummary(run) {
  const body = document.getElementById("summary-body");
  const rows = [];
  const walk = (value, path) => {
    if (isInternalKey(path)) return; // the SDK's own bookkeeping, stored but not shown (issue 24)
    if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
      for (const [k, v] of Object.entries(value)) walk(v, path ? `${path}/${k}` : k);
    } else {
      const shown = typeof value === "number" ? formatNumber(value) : h("code", {}, JSON.stringify(value));
      rows.push(h("tr", {}, h("th", { scope: "row" }, path), h("td", { class: "num", title: String(value) }, shown)));
    }
  };
  if (Object.keys(run.summary || {}).length) walk(run.summary, "");
  if (!rows.length) {
    body.replaceChildren(h("p", { class: "muted" }, "No summary yet."));
    return;
  }
  body.replaceChildren(h("table", { class: "grid kv" }, h("tbody", {}, rows)));
}

async function renderConfig(run) {
  const label = document.getElementById("config-label");
  const body = document.getElementById("config-body");
  if (!run.config) {
    label.textContent = "This run was launched without a config.";
    return;
  }
  const parts = [`format: ${run.config.format}`];
  if (run.config.filename) parts.push(`file: ${run.config.filename}`);
  const bytes = `${formatNumber(new TextEncoder().encode(run.config.text).length)} bytes`;
  // A file is kept byte for byte; a mapping (init(config={...}), a Prime config) arrived as
  // values and is stored as JSON: it was never a text to keep "exactly" (issue 24).
  parts.push(run.config.filename || run.config.format !== "json"
    ? `${bytes}, exactly as launched` : `${bytes}: a mapping, as sent, stored as JSON`);
  label.textContent = parts.join(" · ");
  body.innerHTML = await api(`/ui${base}/config`, {}, { text: true }); // Pygments HTML, escaped by it
}

function renderExports() {
  const names = ["metrics.parquet", "metrics.ndjson", "episodes.parquet", "episodes.ndjson"];
  document.getElementById("export-links").replaceChildren(
    ...names.map((name) => h("li", {}, downloadLink(apiUrl(`${base}/export/${name}`), name))),
  );
  document.getElementById("compare-link").href = `/compare?runs=${encodeURIComponent(runId)}`;
}

function renderSteps() {
  const tbody = document.querySelector("#steps-table tbody");
  const steps = [...state.steps.keys()].sort((a, b) => (a === null) - (b === null) || b - a);
  document.getElementById("steps-empty").hidden = steps.length > 0;
  document.getElementById("steps-table").hidden = steps.length === 0;
  tbody.replaceChildren(...steps.slice(0, state.stepsShown).map((step) => {
    const row = state.steps.get(step);
    const counts = [
      h("td", { class: "num" }, formatNumber(row.count)),
      rewardCell(row),
      h("td", { class: row.off_policy ? "num off-policy" : "num muted" }, formatNumber(row.off_policy ?? 0)),
    ];
    // Records logged without a step have no step page (the API filters by a number).
    if (step === null) return h("tr", {}, h("td", {}, "(no step)"), counts);
    const href = `${base}/steps/${step}${stepsSearch()}`;
    return linkRow(href, [h("td", {}, h("a", { href, tabindex: "-1" }, `step ${step}`)), counts], {
      dataset: { step },
    });
  }));
  const more = document.getElementById("steps-more");
  more.hidden = steps.length <= state.stepsShown && !state.stepsOlder;
  more.textContent = state.stepsOlder ? "Show more steps" : `Show more steps (${steps.length - state.stepsShown} more)`;
}

// The oldest and newest step held (null: none held), without spreading a run's steps into a call.
function heldSteps() {
  let oldest = null;
  let newest = null;
  for (const step of state.steps.keys()) {
    if (step === null) continue;
    if (oldest === null || step < oldest) oldest = step;
    if (newest === null || step > newest) newest = step;
  }
  return { oldest, newest };
}

function keepSteps(rows) {
  let changed = false;
  for (const row of rows) {
    const before = state.steps.get(row.step);
    if (!before || before.count !== row.count || before.scored !== row.scored || before.avg_reward !== row.avg_reward || before.off_policy !== row.off_policy) {
      state.steps.set(row.step, { count: row.count, scored: row.scored, avg_reward: row.avg_reward, off_policy: row.off_policy });
      changed = true;
    }
  }
  return changed;
}

// The page of steps before the oldest held ("Show more steps").
async function readOlderSteps() {
  const { oldest } = heldSteps();
  const rows = await api(`${base}/steps`, { ...stepsQuery(), order: "desc", limit: STEPS_PAGE, after: oldest ?? undefined }, { read: stepsView.join() });
  keepSteps(rows);
  state.stepsOlder = olderAfter(rows);
}

// Whether steps older than a newest-first page of them remain (its last row is not the
// records of no step, which end the walk).
function olderAfter(rows) {
  return rows.length === STEPS_PAGE && rows.at(-1).step !== null;
}

// The mean of the scored records; with some unscored, also counting them as 0 (verifiers').
function rewardCell(row) {
  const { scored, unscored, asZero } = rewardMeans(row);
  return h("td", { class: "num" }, formatNumber(scored), asZero === null ? null
    : h("span", { class: "muted as-zero", title: `counting the ${unscored} unscored as 0, as verifiers and prime-runs do` },
      ` (${formatNumber(asZero)} with ${formatNumber(unscored)} unscored as 0)`));
}

function updateSlider() {
  const slider = document.getElementById("slider");
  const range = document.getElementById("step-range");
  const number = document.getElementById("step-number");
  const max = Math.max(state.maxStep, heldSteps().newest ?? -1, -1);
  if (max < 1 || !state.keys.size) return; // it marks charts: none (or one step), no slider
  const follow = slider.hidden || Number(range.value) === Number(range.max);
  slider.hidden = false;
  range.max = number.max = String(max);
  // Follow the newest step until a step is chosen (or is being typed).
  const typing = document.activeElement === number || document.activeElement === range;
  if (follow && grid.marker === null && !typing) range.value = number.value = String(max);
}

let stepTimer = null;
function selectStep(step) {
  const range = document.getElementById("step-range");
  const number = document.getElementById("step-number");
  range.value = number.value = String(step);
  grid.setMarker(step);
  clearTimeout(stepTimer);
  stepTimer = setTimeout(() => describeStep(step).catch(showError), 120);
}

// What the slider's step holds: its episodes (a link) and every metric's value there; of the
// step chosen last (an answer for a step passed on the way never lands after it, issue 24).
const stepInfoView = new View();
async function describeStep(step) {
  const info = document.getElementById("step-info");
  const read = stepInfoView.begin();
  // A step older than the steps table holds is read on its own.
  const unread = state.stepsOlder && step < (heldSteps().oldest ?? Infinity);
  // A run of many keys: the values of the charted ones (a read names at most 500 keys).
  const keys = charted.on ? [...charted.keys].slice(0, 500).join(",") : undefined;
  const [values, stepRows] = await Promise.all([
    api(`${base}/metrics`, { keys, step_min: step, step_max: step, max_points: 0 }, { read }),
    unread ? api(`${base}/steps`, { ...stepsQuery(), step_min: step, step_max: step }, { read }) : null,
  ]);
  const episodes = unread ? stepRows[0] : state.steps.get(step);
  const shown = Object.entries(values.series)
    .filter(([, s]) => s.step.length)
    .map(([key, s]) => h("span", { class: "value" }, h("span", { class: "muted" }, key), " ", formatNumber(s.value[0])));
  fill(info,
    episodes
      ? h("a", { href: `${base}/steps/${step}` }, `${formatNumber(episodes.count)} episodes, mean reward ${formatNumber(episodes.avg_reward)} →`)
      : h("span", { class: "muted" }, "no episodes at this step"),
    shown.length ? h("span", { class: "values" }, shown) : null,
  );
}

function setUpSlider() {
  const range = document.getElementById("step-range");
  const number = document.getElementById("step-number");
  range.addEventListener("input", () => selectStep(Number(range.value)));
  number.addEventListener("change", () => selectStep(Number(number.value)));
  document.getElementById("steps-more").addEventListener("click", async () => {
    state.stepsShown += 200;
    try {
      if (state.stepsOlder && state.stepsShown > state.steps.size) await readOlderSteps();
    } finally {
      renderSteps();
    }
  });
  navigableRows(document.querySelector("#steps-table tbody"));
  for (const id of ["steps-by", "steps-kind"]) {
    document.getElementById(id).addEventListener("change", () => {
      state.steps.clear();
      state.stepsOlder = false;
      renderSteps();
      pollSteps(stepsView.begin()).catch(showError);
    });
  }
}

// -- tabs: Overview and Logs (#logs in the URL) -----------------------------------------------

function showTab(name) {
  for (const tab of ["overview", "logs"]) {
    const selected = tab === name;
    const button = document.getElementById(`tab-${tab}`);
    button.setAttribute("aria-selected", String(selected));
    button.tabIndex = selected ? 0 : -1;
    document.getElementById(`panel-${tab}`).hidden = !selected;
  }
  if (name === "logs" && state.run) logs.start(state.run).catch(showError);
}

function setUpTabs() {
  const fromHash = () => showTab(location.hash === "#logs" ? "logs" : "overview");
  for (const tab of ["overview", "logs"]) {
    document.getElementById(`tab-${tab}`).addEventListener("click", () => {
      history.replaceState(null, "", tab === "logs" ? "#logs" : location.pathname + location.search);
      showTab(tab);
    });
  }
  document.querySelector(".tabs").addEventListener("keydown", (event) => {
    if (!["ArrowLeft", "ArrowRight"].includes(event.key)) return;
    const next = document.getElementById("tab-overview").getAttribute("aria-selected") === "true" ? "logs" : "overview";
    document.getElementById(`tab-${next}`).click();
    document.getElementById(`tab-${next}`).focus();
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
}

// New points of every charted key, one request per axis: step series from the smallest step
// not yet drawn, rows logged without a step from the earliest last time drawn.
async function pollMetrics(keysRead) {
  const page = await keysRead;
  const keys = charted.update(page) ? [...charted.rows.values()] : page.items;
  const fresh = [];
  const freshTimed = [];
  for (const row of keys) {
    state.keys.set(chartId(row.key, row.axis), row);
    if (row.axis === "time") {
      const id = chartId(row.key, "time");
      if (grid.isLoaded(id) && row.last_ts > grid.lastStep(id, runId)) freshTimed.push(row.key);
      continue;
    }
    state.maxStep = Math.max(state.maxStep, row.last_step);
    if (grid.isLoaded(row.key) && row.last_step > grid.lastStep(row.key, runId)) fresh.push(row.key);
  }
  const empty = document.getElementById("charts-empty");
  empty.hidden = keys.length > 0;
  empty.textContent = [state.run?.status === "running" ? "No metrics yet." : "No metrics were logged.",
    grid.bands ? "The chart below is of the episodes' rewards." : ""].join(" ");
  grid.setKeys(keys);
  const reads = [];
  if (fresh.length) {
    const after = Math.min(...fresh.map((key) => grid.lastStep(key, runId))) + 1;
    const width = grid.charts.get(fresh[0]).width();
    reads.push(api(`${base}/metrics`, { keys: fresh.join(","), step_min: after, max_points: width })
      .then((body) => grid.append(runId, body.series)));
  }
  if (freshTimed.length) {
    const since = Math.min(...freshTimed.map((key) => grid.lastStep(chartId(key, "time"), runId)));
    const width = grid.charts.get(chartId(freshTimed[0], "time")).width();
    reads.push(api(`${base}/metrics`, {
      keys: freshTimed.join(","), ts_min: since, step_min: "9223372036854775807", max_points: width,
    }).then((body) => grid.append(runId, body.time, "time")));
  }
  await Promise.all(reads);
}

// What a step is in the steps table (dispatched at or trained at) and which kind it counts.
function stepsQuery() {
  return { by: document.getElementById("steps-by").value, kind: document.getElementById("steps-kind").value };
}

// The step page's query string for the steps table's choice.
function stepsSearch() {
  const { by, kind } = stepsQuery();
  const params = new URLSearchParams();
  if (by !== "dispatched") params.set("by", by);
  if (kind) params.set("kind", kind);
  return params.size ? `?${params}` : "";
}

// The newest page of steps, then steps from a few before the last one held on: with
// asynchronous RL, episodes are indexed at the step they were dispatched at and can land a few
// steps late (and are trained later). More new steps than a page since the last poll: the
// table starts again from the newest page (what it holds stays one run of steps).
// A change of the table's meaning or kind begins a read (the poll's joins): an answer for
// the choice before never lands in the table.
const stepsView = new View();
async function pollSteps(read = stepsView.join()) {
  const { newest } = heldSteps();
  const from = newest === null ? undefined : newest - LATE_STEPS;
  const rows = await api(`${base}/steps`, { ...stepsQuery(), order: "desc", limit: STEPS_PAGE, step_min: from }, { read });
  if (from === undefined || rows.length === STEPS_PAGE) {
    if (from !== undefined) state.steps.clear();
    state.stepsOlder = olderAfter(rows);
  }
  if (keepSteps(rows)) {
    renderSteps();
    // Bands from two steps on: one step's rewards are its row in the steps table (issue 24).
    if ([...state.steps].filter(([step, row]) => step !== null && row.avg_reward !== null).length > 1) grid.addBands();
    if (bandsShown) grid.refreshBands().catch(showError);
    bandsShown = true;
  }
}

let bandsShown = false;

// -- notes, tags, group: PATCH /runs/{id} ---------------------------------------------------

function renderTags(run) {
  document.getElementById("tag-list").replaceChildren(...(run.tags || []).map((tag) => h("li", { class: "chip", dataset: { tag } },
    h("a", { class: "tag", href: `/?tag=${encodeURIComponent(tag)}` }, tag),
    h("button", { type: "button", class: "link", "aria-label": `remove tag ${tag}`, onclick: () => saveTags(run.tags.filter((t) => t !== tag)) }, "✕"))));
}

// The notes form follows the stored run unless the reader is editing it.
let notesDirty = false;
function renderNotes(run) {
  renderTags(run);
  if (notesDirty) return;
  document.getElementById("notes-text").value = run.notes || "";
  document.getElementById("group-input").value = run.group || "";
}

async function patchRun(changes, status) {
  status.textContent = "saving…";
  try {
    const run = await apiSend("PATCH", base, changes);
    state.run = run;
    state.signature = null; // redraw the header from the saved run
    renderHeader(run);
    renderNotes(run);
    status.textContent = "saved";
  } catch (error) {
    status.textContent = `not saved: ${error.message}`;
    throw error;
  }
}

function saveTags(tags) {
  patchRun({ tags }, document.getElementById("notes-status")).catch(showError);
}

function setUpNotes() {
  const text = document.getElementById("notes-text");
  const group = document.getElementById("group-input");
  for (const input of [text, group]) input.addEventListener("input", () => { notesDirty = true; });
  document.getElementById("notes-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const changes = { notes: text.value.trim() ? text.value : null, group: group.value.trim() || null };
    patchRun(changes, document.getElementById("notes-status"))
      .then(() => { notesDirty = false; })
      .catch(showError);
  });
  document.getElementById("tag-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("tag-input");
    const tag = input.value.trim();
    if (!tag || !state.run) return;
    input.value = "";
    if (!(state.run.tags || []).includes(tag)) saveTags([...(state.run.tags || []), tag]);
  });
  document.getElementById("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = document.getElementById("search-q").value.trim();
    if (q) location.href = `${base}/search?q=${encodeURIComponent(q)}`;
  });
}

async function pollMedia() {
  const served = await media.poll();
  mediaAt = served ? Date.now() : false;
}

// What a run logged by the W&B SDK says of itself (wandb-metadata.json, its job type, a fork's
// origin): undefined until read, null for a run without a W&B side.
let wandbSide;

function wandbFacts(side) {
  if (!side) return [];
  const meta = side.metadata || {};
  const gpu = meta.gpu ? `${meta.gpu_count || 1} × ${meta.gpu}` : null;
  const facts = [
    ["W&B entity", side.entity],
    ["Job type", side.job_type],
    ["Host", meta.host],
    ["Program", meta.program ? h("code", {}, [meta.program, ...(meta.args || [])].join(" ")) : null],
    ["Python", meta.python],
    ["GPU", gpu],
    ["Git commit", meta.git?.commit ? h("code", {}, meta.git.commit) : null],
    ["Forked from", side.forked_from ? h("a", { href: `/runs/${encodeURIComponent(side.forked_from.split("?")[0])}` }, side.forked_from) : null],
  ];
  return facts.filter(([, value]) => value);
}

// Stop: the run's process is asked to stop (a W&B run's SDK stops its script); the run stays
// running until that process ends it.
function stopButton(run) {
  if (run.stop_requested_at) return h("span", { class: "badge", id: "stop-requested" }, "stop requested");
  const button = h("button", { type: "button", id: "stop-run", title: "Ask the run's process to stop" }, "Stop run");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      state.run = await apiSend("POST", `${base}/stop`);
      state.signature = null;
      renderHeader(state.run);
    } catch (error) {
      button.disabled = false;
      showError(error);
    }
  });
  return button;
}

// Delete: the run and everything it owns, for good, after the browser's own confirmation. The
// page stops polling first (the run answers 404 from the moment it is deleted), then goes to
// the runs page once the server has removed everything.
function deleteButton(run) {
  const button = h("button", { type: "button", id: "delete-run", class: "danger", title: "Delete this run and all its data" }, "Delete run");
  button.addEventListener("click", async () => {
    const name = run.name ? ` (${run.name})` : "";
    if (!confirm(`Delete run ${run.id}${name} and all its data: metrics, episodes, logs, files? This cannot be undone.`)) return;
    button.disabled = true;
    button.textContent = "Deleting…";
    polling.stop();
    try {
      await apiSend("DELETE", base);
      location.assign(`/?deleted=${encodeURIComponent(run.id)}`);
    } catch (error) {
      button.disabled = false;
      button.textContent = "Delete run";
      showError(error);
    }
  });
  return button;
}

let configShown = false;
let timelineAt = Date.now();
async function tick() {
  // The keys are read beside the run and its side reads (the charts wait on them; issue 21).
  const keysRead = recentKeys(runId);
  keysRead.catch(() => {}); // a missing run is said by the run's read
  let run;
  try {
    run = await api(base);
  } catch (error) {
    if (showMissing(error, `No run ${runId}`)) return false;
    throw error;
  }
  // Read beside the charts' reads (the header waits for them, the charts do not).
  const sides = Promise.all([
    wandbSide === undefined ? api(`${base}/wandb`).catch(() => null) : wandbSide,
    // read once: passes are hours apart
    retention === undefined && run.status !== "running" ? api(`${base}/retention`).catch(() => null) : retention,
  ]).then(([side, kept]) => {
    wandbSide = side;
    retention = kept;
  });
  const first = state.run === null;
  state.run = run;
  grid.sources[0].label = runLabel(run);
  grid.sources[0].start = run.created_at;
  grid.sources[0].kind = run.kind;
  if (first && location.hash === "#logs") showTab("logs");
  if ((run.error || ["failed", "crashed"].includes(run.status)) && state.linesPrinted === null) {
    state.linesPrinted = (await api(`${base}/logs`, { tail: "true", limit: 1 })).totals.lines;
  }
  const logsOpen = !document.getElementById("panel-logs").hidden;
  const mediaDue = mediaAt === null || (mediaAt !== false && run.status === "running" && Date.now() - mediaAt > MEDIA_MS);
  await Promise.all([sides, pollMetrics(keysRead), pollSteps(), logsOpen ? logs.poll() : null, mediaDue ? pollMedia() : null]);
  if (run.status === "running" && Date.now() - timelineAt > TIMELINE_MS) {
    timelineAt = Date.now();
    grid.refreshTimelines();
  }
  // Rebuilt only when something changed, so a selection in the error text survives a poll.
  const signature = JSON.stringify([run, state.maxStep, state.linesPrinted, retention]);
  if (signature !== state.signature) {
    state.signature = signature;
    renderHeader(run);
    renderSummary(run);
    renderNotes(run);
  } else {
    document.getElementById("duration").textContent = formatDuration(runDuration(run));
  }
  updateSlider();
  if (!configShown) {
    configShown = true;
    renderExports();
    renderConfig(run).catch(showError);
  }
  const live = run.status === "running" || Date.now() / 1000 - (run.finished_at || 0) < AFTER_FINISH_S;
  document.body.dataset.live = String(live);
  return live;
}

setUpSlider();
setUpNotes();
setUpTabs();
// The tabs and panels are kept out of sight (laid out, not shown) until the first tick has
// drawn the header and decided what the overview holds: shown before, they were moved down
// under the reader's pointer, by ~190 px when the header came and again when the step slider
// did. Shown whatever that tick's reads did (an error is said in the banner above them).
const polling = poll(async () => {
  try {
    return await tick();
  } finally {
    revealFirstReads();
  }
}, POLL_MS);
