// The step page: the episodes (or bare traces) of one step (the step they were dispatched at,
// or trained at: `by`), sorted by reward, filterable by kind, subset, environment and outcome,
// each row with its dispatched and trained steps (off-policy rows marked) and a preview (the first user message and the final
// answer, read from the record by the server: /previews), a histogram of the step's rewards,
// and two rows to open side by side. Pages of PAGE rows through the API's cursor. Live: every
// POLL_MS it reads this step's row of /steps and, when the step has gained records, reads the
// first page and the histogram again (one step, not a history).

import {
  api, envName, formatDuration, isAbandoned, formatNumber, h, linkRow, navigableRows, okBadge, pathParts,
  poll, prefs, rewardMeans, runTitle, showError, showMissing, View,
} from "./common.js";

const PAGE = 100;
const PREVIEW_BATCH = 200; // ids per /previews call (the server's limit)
const POLL_MS = 3000;
const AFTER_FINISH_S = 90; // late uploads are still accepted for a while

const [, runId, , stepText] = pathParts();
const step = Number(stepText);
const base = `/runs/${encodeURIComponent(runId)}`;

const el = (id) => document.getElementById(id);
const tbody = document.querySelector("#episodes tbody");

const state = {
  rows: [], cursor: null, total: null, envs: new Set(), subsets: new Set(), seenIds: new Set(), neighbours: {},
  previews: new Map(), selected: new Set(),
};

function filters() {
  return {
    step,
    by: el("f-by").value,
    kind: el("f-kind").value,
    subset: el("f-subset").value,
    sort: el("f-sort").value,
    env: el("f-env").value,
    ok: el("f-ok").value,
    stream: el("f-stream").value,
  };
}

// What makes "the step": its meaning and the kind and cohort of records (for /steps and the
// histogram; env and outcome only filter the rows).
function stepQuery() {
  const f = filters();
  return { stream: f.stream, by: f.by, kind: f.kind, subset: f.subset };
}

// Keep the filters in the URL so a reload or a shared link shows the same list.
function readUrl() {
  const params = new URLSearchParams(location.search);
  for (const [name, id] of [["sort", "f-sort"], ["ok", "f-ok"], ["stream", "f-stream"], ["by", "f-by"], ["kind", "f-kind"]]) {
    if (params.has(name)) el(id).value = params.get(name);
  }
  if (params.get("env")) addEnv(params.get("env"), true);
  if (params.get("subset")) addOption("f-subset", state.subsets, params.get("subset"), true);
}

function writeUrl() {
  const f = filters();
  const params = new URLSearchParams();
  if (f.sort !== "-reward") params.set("sort", f.sort);
  for (const name of ["env", "ok", "kind", "subset"]) if (f[name]) params.set(name, f[name]);
  if (f.stream !== "episodes") params.set("stream", f.stream);
  if (f.by !== "dispatched") params.set("by", f.by);
  history.replaceState(null, "", params.size ? `?${params}` : location.pathname);
  linkNeighbours();
}

// Previous and next steps with records, keeping the filters.
function linkNeighbours() {
  for (const [id, other] of Object.entries(state.neighbours)) {
    if (other !== undefined) Object.assign(el(id), { hidden: false, href: `${base}/steps/${other}${location.search}` });
  }
}

function addOption(id, seen, name, select = false) {
  if (name && !seen.has(name)) {
    seen.add(name);
    el(id).append(h("option", { value: name }, name));
  }
  if (select) el(id).value = name;
}

function addEnv(name, select = false) {
  addOption("f-env", state.envs, name, select);
}

function noteRow(item) {
  addEnv(item.env);
  addOption("f-subset", state.subsets, item.subset);
}

// Trained at another step than dispatched at: the trainer took it off-policy (async RL).
function offPolicy(item) {
  return item.trained_step !== null && item.trained_step !== undefined && item.step !== null && item.trained_step !== item.step;
}

function trainedCell(item) {
  if (item.trained_step === null || item.trained_step === undefined) return h("td", { class: "num trained muted" }, "—");
  const lag = item.step !== null ? item.trained_step - item.step : null;
  return h("td", { class: "num trained" }, formatNumber(item.trained_step),
    offPolicy(item) ? [" ", h("span", { class: "badge off-policy", title: `dispatched at step ${item.step}, trained at step ${item.trained_step}` }, `off-policy ${lag > 0 ? "+" : ""}${lag}`)] : null);
}

const PREVIEW_FIELDS = ["prompt", "reply", "answer"]; // cells 3, 4, 5 of a row

function previewCell(item, field) {
  const preview = state.previews.get(item.id);
  const text = preview?.[field];
  return h("td", { class: `preview ${field}`, title: text || null }, text ?? (preview ? h("span", { class: "muted" }, "—") : ""));
}

function row(item, rank) {
  // The step page's order and filters go along, for the episode page's previous/next.
  const href = `${base}/episodes/${encodeURIComponent(item.id)}${location.search}`;
  const fresh = state.seenIds.size && !state.seenIds.has(item.id);
  const box = h("input", {
    type: "checkbox", "aria-label": `select ${item.id} for side by side`, checked: state.selected.has(item.id),
    onchange: (e) => {
      if (e.target.checked) state.selected.add(item.id);
      else state.selected.delete(item.id);
      updatePair();
    },
  });
  return linkRow(href, [
    h("td", {}, box),
    h("td", { class: "num" }, rank),
    h("td", { class: "num" }, formatNumber(item.reward)),
    ...PREVIEW_FIELDS.map((field) => previewCell(item, field)),
    h("td", { class: "env" }, envName(item.env)),
    // Train is the usual kind: plain text; anything else stands out.
    h("td", {}, item.kind === "train" || !item.kind ? h("span", { class: "muted" }, item.kind || "—")
      : h("span", { class: `badge kind kind-${item.kind}` }, item.kind), item.subset ? [" ", h("span", { class: "muted" }, item.subset)] : null),
    h("td", { class: "num" }, formatNumber(item.step)),
    trainedCell(item),
    h("td", {}, okBadge(item.ok)),
    h("td", { class: "num" }, formatNumber(item.tokens)),
    h("td", { class: "num" }, formatDuration(item.duration)),
    h("td", {}, h("a", { href, tabindex: "-1" }, h("code", { title: item.id }, item.id.slice(0, 12)))),
  ], {
    class: ["link-row", fresh ? "fresh" : "", offPolicy(item) ? "off-policy" : ""].filter(Boolean).join(" "),
    dataset: { reward: item.reward ?? "", id: item.id, trained: item.trained_step ?? "" },
  });
}

function render() {
  tbody.replaceChildren(...state.rows.map((item, i) => row(item, i + 1)));
  for (const item of state.rows) state.seenIds.add(item.id);
  el("episodes-empty").hidden = state.rows.length > 0;
  el("episodes-more").hidden = !state.cursor;
  const f = filters();
  const filtered = ["env", "ok"].some((name) => f[name]);
  const parts = [];
  if (state.total) {
    const noun = [f.kind, f.subset, f.stream].filter(Boolean).join(" ");
    parts.push(`${formatNumber(state.total.count)} ${noun} ${f.by} at this step`);
    const means = rewardMeans(state.total);
    parts.push(means.asZero === null ? `mean reward ${formatNumber(means.scored)}`
      : `mean reward ${formatNumber(means.scored)} of the ${formatNumber(state.total.scored)} scored, `
        + `${formatNumber(means.asZero)} counting the ${formatNumber(means.unscored)} unscored as 0 (as verifiers and prime-runs do)`);
    if (state.total.off_policy) parts.push(`${formatNumber(state.total.off_policy)} off-policy (trained at another step than dispatched at)`);
  }
  parts.push(`showing ${formatNumber(state.rows.length)}${filtered ? " that match the filters" : ""}`);
  if (state.cursor) parts.push("more below");
  el("step-stats").textContent = parts.join(" · ");
}

// What the page shows comes from four views, each drawn from the newest read of it only
// (common.js View, issue 24): the rows with the step's totals, the histogram, and the
// neighbouring steps. A filter change begins a read of each it touches; a poll joins.
const rowsView = new View();
const histogramView = new View();
const neighboursView = new View();

// Previews of the rows that have none yet, in batches; the table is usable before they come.
async function loadPreviews(read) {
  const missing = state.rows.map((r) => r.id).filter((id) => !state.previews.has(id));
  for (let i = 0; i < missing.length; i += PREVIEW_BATCH) {
    const ids = missing.slice(i, i + PREVIEW_BATCH);
    const body = await api(`${base}/previews`, { ids: ids.join(",") }, { read });
    for (const id of ids) state.previews.set(id, body[id] || {});
    for (const tr of tbody.rows) {
      const item = state.rows.find((r) => r.id === tr.dataset.id);
      if (!item || !ids.includes(item.id)) continue;
      PREVIEW_FIELDS.forEach((field, i) => tr.cells[3 + i].replaceWith(previewCell(item, field)));
    }
  }
  tbody.dataset.previews = "loaded";
}

// The first `limit` rows and the step's totals again (after a filter change, or when the step
// gained records: the poll hands over the totals it read), drawn together.
let previewsDrawn = null;
async function reload(limit = PAGE, total = null) {
  const read = rowsView.begin();
  const [page, stepTotal] = await Promise.all([
    api(`${base}/episodes`, { ...filters(), limit: Math.min(limit, 1000) }, { read }),
    total ?? stepRow(read),
  ]);
  state.total = stepTotal;
  state.rows = page.items;
  state.cursor = page.next_cursor;
  for (const item of page.items) noteRow(item);
  render();
  previewsDrawn = loadPreviews(read).catch(showError);
}

async function loadMore() {
  if (!state.cursor) return;
  const read = rowsView.join();
  const rows = state.rows;
  const page = await api(`${base}/episodes`, { ...filters(), limit: PAGE, cursor: state.cursor }, { read });
  if (!read.current() || rows !== state.rows) return; // the rows were read again meanwhile
  state.rows.push(...page.items);
  state.cursor = page.next_cursor;
  for (const item of page.items) noteRow(item);
  render();
  loadPreviews(read).catch(showError);
}

async function stepRow(read) {
  const rows = await api(`${base}/steps`, { ...stepQuery(), step_min: step, step_max: step }, { read });
  return rows.find((r) => r.step === step) || { count: 0, scored: 0, avg_reward: null, off_policy: 0 };
}

// Plotly's bundle, for the histogram only: the page names it in <meta name="plotly"> and fetches
// it after its table, so its evaluation (0.4-0.8 s of main thread here) does not hold that up.
let plotlyLoading = null;
function loadPlotly() {
  plotlyLoading ??= new Promise((resolve, reject) => {
    if (window.Plotly) return resolve();
    const src = document.querySelector('meta[name="plotly"]').content;
    const script = h("script", { id: "plotly", src, async: true });
    script.addEventListener("load", () => resolve());
    script.addEventListener("error", () => reject(new Error("could not load Plotly's bundle")));
    document.head.append(script);
  });
  return plotlyLoading;
}

// The distribution of the step's rewards (all its records, not just the rows shown).
async function drawHistogram() {
  const read = histogramView.begin();
  const body = await api(`${base}/rewards`, { step, ...stepQuery() }, { read });
  await loadPlotly();
  if (!read.current()) return; // a newer read began while the bundle loaded
  const figure = el("histogram");
  const values = body.values;
  const caption = [`${formatNumber(values.length)} rewards`];
  if (values.length) {
    const middle = (values.length - 1) / 2;
    const median = (values[Math.floor(middle)] + values[Math.ceil(middle)]) / 2;
    caption.push(`min ${formatNumber(values[0])}`, `median ${formatNumber(median)}`, `max ${formatNumber(values[values.length - 1])}`);
  }
  if (body.missing) caption.push(`${formatNumber(body.missing)} without a reward`);
  if (body.truncated) caption.push("first 100,000 drawn");
  el("histogram-caption").textContent = caption.join(" · ");
  Plotly.react(figure.querySelector(".plot"), [{
    x: values, type: "histogram", marker: { color: "#1f77b4" }, nbinsx: Math.min(40, Math.max(5, Math.ceil(Math.sqrt(values.length)))),
    hovertemplate: "reward %{x}<br>%{y} records<extra></extra>",
  }], {
    height: 170, margin: { l: 40, r: 10, t: 10, b: 30 }, bargap: 0.05,
    xaxis: { title: { text: "reward", standoff: 2 } }, yaxis: { title: { text: "records", standoff: 2 } },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff",
  }, { displayModeBar: false, responsive: true });
  figure.dataset.count = String(values.length);
}

// Neighbouring steps that have records (in the step's meaning and kind): a row each side.
async function linkSteps() {
  const read = neighboursView.begin();
  const [before, after] = await Promise.all([
    api(`${base}/steps`, { ...stepQuery(), order: "desc", after: step, limit: 1 }, { read }),
    api(`${base}/steps`, { ...stepQuery(), after: step, limit: 1 }, { read }),
  ]);
  const stepOf = (rows) => (rows.length && rows[0].step !== null ? rows[0].step : undefined);
  state.neighbours = { "step-prev": stepOf(before), "step-next": stepOf(after) };
  for (const id of ["step-prev", "step-next"]) el(id).hidden = state.neighbours[id] === undefined;
  linkNeighbours();
}

// Two ticked rows, or one with the episode pinned on its page, open side by side.
function updatePair() {
  const pinned = prefs.get("pinned", null);
  const chosen = [...state.selected];
  const pairs = chosen.length === 2 ? [[runId, chosen[0]], [runId, chosen[1]]]
    : chosen.length === 1 && pinned ? [[pinned.run, pinned.id], [runId, chosen[0]]] : null;
  const button = el("pair-selected");
  button.disabled = !pairs;
  button.textContent = chosen.length === 1 && pinned ? `Side by side with the pinned ${pinned.label}` : "Side by side";
  button.dataset.href = pairs
    ? `/compare/episodes?${new URLSearchParams({ run_a: pairs[0][0], a: pairs[0][1], run_b: pairs[1][0], b: pairs[1][1] })}`
    : "";
}

async function setUp() {
  readUrl();
  // The filters work from the first moment: a change while the first rows are on their way
  // begins newer reads, and the first ones are given up.
  for (const id of ["f-by", "f-kind", "f-subset", "f-sort", "f-env", "f-ok", "f-stream"]) {
    el(id).addEventListener("change", () => {
      writeUrl();
      state.seenIds.clear();
      reload().catch(showError);
      if (["f-by", "f-kind", "f-subset", "f-stream"].includes(id)) {
        drawHistogram().catch(showError);
        linkSteps().catch(showError);
      }
    });
  }
  el("episodes-more").addEventListener("click", () => loadMore().catch(showError));
  el("pair-selected").addEventListener("click", () => {
    if (el("pair-selected").dataset.href) location.href = el("pair-selected").dataset.href;
  });
  updatePair();
  navigableRows(tbody);
  const run = await api(base);
  document.title = `Step ${step} · ${runTitle(run)} · openruns`;
  el("run-link").textContent = runTitle(run);
  el("run-link").href = base;
  el("step-label").textContent = `step ${step}`;
  el("step-title").textContent = `${runTitle(run)}: step ${step}`;
  el("search-link").href = `${base}/search?step_min=${step}&step_max=${step}`;
  for (const env of run.environments || []) addEnv(envName(env));
  linkSteps().catch(showError);
  // (Given up for a filter changed meanwhile: that change's reads draw the page.)
  await reload().catch((error) => { if (!isAbandoned(error)) throw error; });
  // The histogram after the table and its previews: Plotly's bundle is loaded for it only now.
  (previewsDrawn ?? Promise.resolve()).then(() => drawHistogram()).catch(showError);
  poll(async () => {
    const total = await stepRow(rowsView.join());
    if (total.count !== state.total?.count) {
      await Promise.all([reload(Math.max(PAGE, state.rows.length), total), drawHistogram()]);
    }
    const fresh = await api(base);
    return fresh.status === "running" || Date.now() / 1000 - (fresh.finished_at || 0) < AFTER_FINISH_S;
  }, POLL_MS);
}

setUp().catch((error) => showMissing(error, `No run ${runId}`) || showError(error));
