// The runs page: a table of runs newest first, filtered and paged by the server (GET /runs
// with a cursor, PAGE at a time, so 10,000 runs cost what 50 do). Metric columns show the latest
// value of a key: each visible run's 200 most recently logged keys (/metrics/keys, one row per
// key; a run may have 100,000), and its chosen columns beyond them, plus its numeric summary.
// The columns are the reader's choice (the chooser lists 60 keys at most: a search box narrows
// them, Enter adds the key typed), kept in this browser; until one is made, the keys most
// visible runs share, rewards first, then losses, then accuracy-like scores. Rows can be grouped
// (by the runs' project, group, kind, model or status). A filter expression and a sort (the
// server's language: config, summary and latest metric values) live in the URL with the rest. Live: the page is re-read every POLL_MS, and the
// metrics of runs that are still running every METRICS_MS.

import {
  api, formatDuration, formatNumber, h, linkRow, navigableRows, numericLeaves, poll, prefs,
  runDuration, showError, statusBadge, timeCell, View,
} from "./common.js";

const PAGE = 50;
const POLL_MS = 5000;
const METRICS_MS = 10000;
const METRIC_COLUMNS = 3;
const FETCH_CONCURRENCY = 4;
const KEYS_READ = 200; // keys read of each visible run, the most recently logged
const CHOOSER_SHOWN = 60; // metric keys offered at once in the column chooser

const el = (id) => document.getElementById(id);
const tbody = document.querySelector("#runs tbody");

// Run columns: header -> cell of a run. Shown by default unless `hidden`.
const FIXED = {
  Status: { cell: (run) => statusBadge(run.status) },
  Kind: { cell: (run) => run.kind },
  Name: {
    cell: (run) => [h("a", { href: `/runs/${encodeURIComponent(run.id)}`, tabindex: "-1" }, run.name || run.id),
      (run.tags || []).map((t) => [" ", h("span", { class: "tag" }, t)])],
  },
  Project: { cell: (run) => run.project || "default", hidden: true },
  Group: { cell: (run) => run.group || h("span", { class: "muted" }, "—"), hidden: true },
  Model: { cell: (run) => run.model || "—" },
  Started: { cell: (run) => timeCell(run.created_at) },
  Duration: { cell: (run) => formatDuration(runDuration(run)), num: true },
};

const state = {
  runs: [],
  cursors: [null], // cursor of each page seen so far; the last one is the current page's
  next: null,
  latest: new Map(), // run id -> {values: {key: number}, at: ms, updated: run.updated_at}
  selected: new Set(),
  // {fixed: [header...], metrics: [key...] | null (automatic)}
  columns: prefs.get("runs.columns", { fixed: null, metrics: null }),
  groupBy: prefs.get("runs.groupBy", ""),
};

function filters() {
  return {
    name: el("f-name").value.trim(),
    status: el("f-status").value,
    kind: el("f-kind").value,
    tag: el("f-tag").value.trim(),
    group: el("f-group").value.trim(),
    project: el("f-project").value.trim(),
    filter: el("f-filter").value.trim(),
    sort: el("f-sort").value.trim(),
  };
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  for (const name of ["name", "status", "kind", "tag", "group", "project", "filter", "sort"]) {
    el(`f-${name}`).value = params.get(name) || "";
  }
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

// How many visible runs have each key.
function keysSeen() {
  const seen = new Map();
  for (const run of state.runs) {
    for (const key of Object.keys(valuesOf(run))) seen.set(key, (seen.get(key) || 0) + 1);
  }
  return seen;
}

// The chosen metric columns, else: the most shared key of each preference class (rewards,
// losses, scores) first, then the next most shared of any class; ties go to the shorter name.
function metricColumns() {
  if (state.columns.metrics) return state.columns.metrics;
  const seen = keysSeen();
  const ranked = [...seen.keys()]
    .filter((key) => rank(key) < PREFERENCE.length)
    .sort((a, b) => seen.get(b) - seen.get(a) || a.length - b.length || a.localeCompare(b));
  const firsts = PREFERENCE.map((_, i) => ranked.find((key) => rank(key) === i)).filter(Boolean);
  const rest = ranked.filter((key) => !firsts.includes(key));
  return [...firsts, ...rest].slice(0, METRIC_COLUMNS);
}

function fixedColumns() {
  return state.columns.fixed || Object.keys(FIXED).filter((name) => !FIXED[name].hidden);
}

// Latest values: the metric's last logged value, else the summary's.
function valuesOf(run) {
  return { ...numericLeaves(run.summary || {}), ...(state.latest.get(run.id)?.values || {}) };
}

function runRow(run, fixed, columns) {
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
    ...fixed.map((name) => h("td", { class: FIXED[name].num ? "num" : null }, FIXED[name].cell(run))),
    ...columns.map((c) => h("td", { class: "num", title: String(values[c] ?? "") }, formatNumber(values[c]))),
  ], { dataset: { runId: run.id, status: run.status } });
}

// Runs in groups of the chosen field, each group under a header row, groups in the order of
// their newest run.
function grouped(rows, width) {
  if (!state.groupBy) return rows.map(([, tr]) => tr);
  const groups = new Map();
  for (const [run, tr] of rows) {
    const name = run[state.groupBy] ?? "";
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push(tr);
  }
  const out = [];
  for (const [name, trs] of groups) {
    out.push(h("tr", { class: "group-row", dataset: { group: name } }, h("th", { colspan: String(width), scope: "rowgroup" },
      `${state.groupBy}: `, name === "" ? h("span", { class: "muted" }, "(none)") : name,
      h("span", { class: "muted" }, ` · ${trs.length} run${trs.length === 1 ? "" : "s"}`))));
    out.push(...trs);
  }
  return out;
}

// Rebuild the table, keeping keyboard focus on the row (or checkbox) that had it.
function render() {
  const active = document.activeElement;
  const focusedRun = active?.closest?.("#runs tbody tr")?.dataset.runId;
  const onBox = active?.type === "checkbox" && active.closest("#runs");
  const fixed = fixedColumns();
  const columns = metricColumns();
  el("runs-head").replaceChildren(
    h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Select")),
    ...fixed.map((c) => h("th", { scope: "col", class: FIXED[c].num ? "num" : null }, c)),
    ...columns.map((c) => h("th", { scope: "col", class: "num" }, c)),
  );
  const rows = state.runs.map((run) => [run, runRow(run, fixed, columns)]);
  tbody.replaceChildren(...grouped(rows, 1 + fixed.length + columns.length));
  if (focusedRun) {
    const row = [...tbody.rows].find((r) => r.dataset.runId === focusedRun);
    (onBox ? row?.querySelector("input") : row)?.focus();
  }
  el("runs-empty").hidden = state.runs.length > 0;
  const page = state.cursors.length;
  el("page-label").textContent = state.runs.length ? `page ${page}` : "";
  el("page-newer").disabled = page <= 1;
  el("page-older").disabled = !state.next;
  renderChooser();
}

// The column chooser: run columns, and every metric or summary key of the visible runs (and
// any chosen before), ticked when shown.
function renderChooser() {
  const fixed = fixedColumns();
  const columns = metricColumns();
  const box = (value, checked, onchange) => h("label", { class: "check" },
    h("input", { type: "checkbox", value, checked, onchange }), " ", value);
  el("columns-fixed").replaceChildren(h("legend", {}, "Run"), ...Object.keys(FIXED).map((name) => box(name, fixed.includes(name), (e) => {
    const chosen = Object.keys(FIXED).filter((n) => (n === name ? e.target.checked : fixed.includes(n)));
    saveColumns({ fixed: chosen });
  })));
  // The chosen columns, then the keys matching the search box: CHOOSER_SHOWN at most.
  const text = el("columns-q").value.trim().toLowerCase();
  const matching = [...keysSeen().keys()].filter((key) => !columns.includes(key) && key.toLowerCase().includes(text)).sort();
  const shown = matching.slice(0, Math.max(0, CHOOSER_SHOWN - columns.length));
  el("columns-metrics").replaceChildren(h("legend", {}, "Metrics and summary (latest value)"),
    ...[...columns, ...shown].map((key) => box(key, columns.includes(key), (e) => {
      const chosen = e.target.checked ? [...columns, key] : columns.filter((k) => k !== key);
      saveColumns({ metrics: chosen });
    })),
    matching.length > shown.length
      ? h("p", { class: "muted" }, `${formatNumber(matching.length - shown.length)} more: type part of a name above`)
      : null);
  el("columns-auto").disabled = !state.columns.metrics;
}

// Enter in the chooser's search box adds the key typed as a column, seen or not.
function addTypedColumn(event) {
  if (event.key !== "Enter") return;
  event.preventDefault();
  const key = event.target.value.trim();
  const columns = metricColumns();
  if (!key || columns.includes(key)) return;
  event.target.value = "";
  state.latest.clear(); // read again, with the new column's values
  saveColumns({ metrics: [...columns, key] });
  loadMetrics().catch(showError);
}

function saveColumns(changes) {
  state.columns = { ...state.columns, ...changes };
  prefs.set("runs.columns", state.columns);
  render();
}

// The filter box (issue 22): an expression (and a sort) the server parses; its 400 names the
// token and position, shown under the box.
const QUERY_ERRORS = new Set(["invalid_filter", "invalid_sort", "invalid_cursor"]);
function showQueryError(message) {
  const box = el("filter-error");
  box.textContent = message;
  box.hidden = !message;
  for (const id of ["f-filter", "f-sort"]) el(id).toggleAttribute("aria-invalid", Boolean(message));
}

// The table shows the newest read of the page (a filter or page change begins one, a poll
// joins): a poll's answer for the filters before cannot replace it (issue 24).
const pageView = new View();

async function loadPage(read = pageView.begin()) {
  const cursor = state.cursors[state.cursors.length - 1];
  let body;
  try {
    body = await api("/runs", { ...filters(), limit: PAGE, cursor }, { read });
  } catch (error) {
    if (!QUERY_ERRORS.has(error.code)) throw error;
    // A filter or sort that does not parse: the server's message under the box, no rows.
    if (!read.current()) return;
    showQueryError(error.message);
    state.runs = [];
    state.next = null;
    render();
    return;
  }
  showQueryError("");
  state.runs = body.items;
  state.next = body.next_cursor;
  if (!document.getElementById("columns").contains(document.activeElement)) render();
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
      const values = await latestValues(run);
      state.latest.set(run.id, { values, at: Date.now(), updated: run.updated_at });
      changed = true;
    }
  };
  await Promise.all(Array.from({ length: FETCH_CONCURRENCY }, work));
  if (changed) render();
}

// A run's latest values: of its KEYS_READ most recently logged keys (its first page of keys,
// issue 21: a run may have 100,000), and of the chosen columns it has beyond them.
async function latestValues(run) {
  const path = `/runs/${encodeURIComponent(run.id)}`;
  const page = await api(`${path}/metrics/keys`, { order: "recent", limit: KEYS_READ });
  const values = Object.fromEntries(page.items.map((k) => [k.key, k.last_value]));
  const missing = (state.columns.metrics || []).filter((key) => !(key in values)).slice(0, 500);
  if (page.next_cursor && missing.length) {
    const body = await api(`${path}/metrics`, { keys: missing.join(","), max_points: 1 });
    for (const series of [body.series, body.time || {}]) {
      for (const [key, s] of Object.entries(series)) if (s.value.length) values[key] = s.value.at(-1);
    }
  }
  return values;
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
  el("group-by").value = state.groupBy;
  el("filters").addEventListener("submit", (e) => e.preventDefault());
  for (const id of ["f-name", "f-tag", "f-group", "f-project"]) el(id).addEventListener("input", onFilter);
  for (const id of ["f-status", "f-kind"]) el(id).addEventListener("change", onFilter);
  // An expression applies when it is committed (Enter, leaving the box), not at each keystroke.
  for (const id of ["f-filter", "f-sort"]) el(id).addEventListener("change", onFilter);
  el("group-by").addEventListener("change", () => {
    state.groupBy = el("group-by").value;
    prefs.set("runs.groupBy", state.groupBy);
    render();
  });
  el("columns-auto").addEventListener("click", () => saveColumns({ metrics: null }));
  el("columns-q").addEventListener("input", renderChooser);
  el("columns-q").addEventListener("keydown", addTypedColumn);
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
  poll(() => loadPage(pageView.join()), POLL_MS);
}

setUp();
