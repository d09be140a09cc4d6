// The runs page: a table of runs newest first, filtered and paged by the server (GET /runs
// with a cursor, PAGE at a time, so 10,000 runs cost what 50 do). Columns show the latest value
// of a few key metrics: each visible run's /metrics/keys (one row per key), plus its numeric
// summary; the columns are the keys most visible runs share, rewards first, then losses, then
// accuracy-like scores. Live: the page is re-read every POLL_MS, and the metrics of runs that
// are still running every METRICS_MS.

import {
  api, formatDuration, formatNumber, h, linkRow, navigableRows, numericLeaves, poll, runDuration,
  showError, statusBadge, timeCell,
} from "./common.js";

const PAGE = 50;
const POLL_MS = 5000;
const METRICS_MS = 10000;
const METRIC_COLUMNS = 3;
const FETCH_CONCURRENCY = 4;

const el = (id) => document.getElementById(id);
const tbody = document.querySelector("#runs tbody");

const state = {
  runs: [],
  cursors: [null], // cursor of each page seen so far; the last one is the current page's
  next: null,
  latest: new Map(), // run id -> {values: {key: number}, at: ms, updated: run.updated_at}
  selected: new Set(),
};

function filters() {
  return {
    name: el("f-name").value.trim(),
    status: el("f-status").value,
    kind: el("f-kind").value,
    tag: el("f-tag").value.trim(),
  };
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  el("f-name").value = params.get("name") || "";
  el("f-status").value = params.get("status") || "";
  el("f-kind").value = params.get("kind") || "";
  el("f-tag").value = params.get("tag") || "";
}

function writeUrl() {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(filters())) if (v) params.set(k, v);
  history.replaceState(null, "", params.size ? `?${params}` : "/");
}

const PREFERENCE = [/reward/i, /loss/i, /acc|score|pass|success/i];

function rank(key) {
  const i = PREFERENCE.findIndex((re) => re.test(key));
  return i < 0 ? PREFERENCE.length : i;
}

// The most shared key of each preference class (rewards, losses, scores) first, then the next
// most shared of any class; ties go to the shorter name.
function metricColumns() {
  const seen = new Map();
  for (const run of state.runs) {
    for (const key of Object.keys(valuesOf(run))) seen.set(key, (seen.get(key) || 0) + 1);
  }
  const ranked = [...seen.keys()]
    .filter((key) => rank(key) < PREFERENCE.length)
    .sort((a, b) => seen.get(b) - seen.get(a) || a.length - b.length || a.localeCompare(b));
  const firsts = PREFERENCE.map((_, i) => ranked.find((key) => rank(key) === i)).filter(Boolean);
  const rest = ranked.filter((key) => !firsts.includes(key));
  return [...firsts, ...rest].slice(0, METRIC_COLUMNS);
}

// Latest values: the metric's last logged value, else the summary's.
function valuesOf(run) {
  return { ...numericLeaves(run.summary || {}), ...(state.latest.get(run.id)?.values || {}) };
}

// Rebuild the table, keeping keyboard focus on the row (or checkbox) that had it.
function render() {
  const active = document.activeElement;
  const focusedRun = active?.closest?.("#runs tbody tr")?.dataset.runId;
  const onBox = active?.type === "checkbox";
  const columns = metricColumns();
  el("runs-head").replaceChildren(
    h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Select")),
    ...["Status", "Kind", "Name", "Model", "Started", "Duration"].map((c) => h("th", { scope: "col" }, c)),
    ...columns.map((c) => h("th", { scope: "col", class: "num" }, c)),
  );
  tbody.replaceChildren(...state.runs.map((run) => {
    const values = valuesOf(run);
    const box = h("input", {
      type: "checkbox", "aria-label": `select ${run.name || run.id} to compare`,
      checked: state.selected.has(run.id),
      onchange: (e) => {
        if (e.target.checked) state.selected.add(run.id);
        else state.selected.delete(run.id);
        el("compare-selected").disabled = state.selected.size < 2;
      },
    });
    return linkRow(`/runs/${encodeURIComponent(run.id)}`, [
      h("td", {}, box),
      h("td", {}, statusBadge(run.status)),
      h("td", {}, run.kind),
      h("td", {}, h("a", { href: `/runs/${encodeURIComponent(run.id)}`, tabindex: "-1" }, run.name || run.id),
        (run.tags || []).map((t) => [" ", h("span", { class: "tag" }, t)])),
      h("td", {}, run.model || "—"),
      h("td", {}, timeCell(run.created_at)),
      h("td", { class: "num" }, formatDuration(runDuration(run))),
      ...columns.map((c) => h("td", { class: "num", title: String(values[c] ?? "") }, formatNumber(values[c]))),
    ], { dataset: { runId: run.id, status: run.status } });
  }));
  if (focusedRun) {
    const row = [...tbody.rows].find((r) => r.dataset.runId === focusedRun);
    (onBox ? row?.querySelector("input") : row)?.focus();
  }
  el("runs-empty").hidden = state.runs.length > 0;
  const page = state.cursors.length;
  el("page-label").textContent = state.runs.length ? `page ${page}` : "";
  el("page-newer").disabled = page <= 1;
  el("page-older").disabled = !state.next;
}

async function loadPage() {
  const cursor = state.cursors[state.cursors.length - 1];
  const body = await api("/runs", { ...filters(), limit: PAGE, cursor });
  state.runs = body.items;
  state.next = body.next_cursor;
  render();
  await loadMetrics();
}

// /metrics/keys of the visible runs that need it: never read, or running and read a while ago,
// or changed since (a run that finished gets its last values once more).
async function loadMetrics() {
  const now = Date.now();
  const due = state.runs.filter((run) => {
    const known = state.latest.get(run.id);
    if (!known) return true;
    if (known.updated !== run.updated_at) return true;
    return run.status === "running" && now - known.at > METRICS_MS;
  });
  let changed = false;
  const work = async () => {
    while (due.length) {
      const run = due.shift();
      const keys = await api(`/runs/${encodeURIComponent(run.id)}/metrics/keys`);
      const values = Object.fromEntries(keys.map((k) => [k.key, k.last_value]));
      state.latest.set(run.id, { values, at: Date.now(), updated: run.updated_at });
      changed = true;
    }
  };
  await Promise.all(Array.from({ length: FETCH_CONCURRENCY }, work));
  if (changed) render();
}

let filterTimer = null;
function onFilter() {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    writeUrl();
    state.cursors = [null];
    loadPage().catch(showError);
  }, 200);
}

function setUp() {
  readUrl();
  el("filters").addEventListener("submit", (e) => e.preventDefault());
  for (const id of ["f-name", "f-tag"]) el(id).addEventListener("input", onFilter);
  for (const id of ["f-status", "f-kind"]) el(id).addEventListener("change", onFilter);
  el("page-older").addEventListener("click", () => {
    state.cursors.push(state.next);
    loadPage().catch(showError);
  });
  el("page-newer").addEventListener("click", () => {
    state.cursors.pop();
    loadPage().catch(showError);
  });
  el("compare-selected").addEventListener("click", () => {
    location.href = `/compare?runs=${[...state.selected].map(encodeURIComponent).join(",")}`;
  });
  navigableRows(tbody);
  poll(loadPage, POLL_MS);
}

setUp();
