// The step page: the episodes (or bare traces) of one step, sorted by reward, filterable by
// environment and outcome, with tokens and duration; pages of PAGE rows through the API's
// cursor. Live: every POLL_MS it reads this step's row of /steps (step_min=step) and, when the
// step has gained records, reads the first page again (one page of one step, not a history).

import {
  api, envName, formatDuration, formatNumber, h, linkRow, navigableRows, okBadge, pathParts,
  poll, runTitle, showError,
} from "./common.js";

const PAGE = 100;
const POLL_MS = 3000;
const AFTER_FINISH_S = 90; // late uploads are still accepted for a while

const [, runId, , stepText] = pathParts();
const step = Number(stepText);
const base = `/runs/${encodeURIComponent(runId)}`;

const el = (id) => document.getElementById(id);
const tbody = document.querySelector("#episodes tbody");

const state = {
  rows: [], cursor: null, total: null, envs: new Set(), seenIds: new Set(), neighbours: {},
};

function filters() {
  return {
    step,
    sort: el("f-sort").value,
    env: el("f-env").value,
    ok: el("f-ok").value,
    stream: el("f-stream").value,
  };
}

// Keep the filters in the URL so a reload or a shared link shows the same list.
function readUrl() {
  const params = new URLSearchParams(location.search);
  for (const [name, id] of [["sort", "f-sort"], ["ok", "f-ok"], ["stream", "f-stream"]]) {
    if (params.has(name)) el(id).value = params.get(name);
  }
  if (params.get("env")) addEnv(params.get("env"), true);
}

function writeUrl() {
  const f = filters();
  const params = new URLSearchParams();
  if (f.sort !== "-reward") params.set("sort", f.sort);
  for (const name of ["env", "ok"]) if (f[name]) params.set(name, f[name]);
  if (f.stream !== "episodes") params.set("stream", f.stream);
  history.replaceState(null, "", params.size ? `?${params}` : location.pathname);
  linkNeighbours();
}

// Previous and next steps with records, keeping the filters.
function linkNeighbours() {
  for (const [id, other] of Object.entries(state.neighbours)) {
    if (other !== undefined) Object.assign(el(id), { hidden: false, href: `${base}/steps/${other}${location.search}` });
  }
}

function addEnv(name, select = false) {
  if (!name || state.envs.has(name)) {
    if (select) el("f-env").value = name;
    return;
  }
  state.envs.add(name);
  el("f-env").append(h("option", { value: name }, name));
  if (select) el("f-env").value = name;
}

function row(item, rank) {
  const href = `${base}/episodes/${encodeURIComponent(item.id)}`;
  const fresh = state.seenIds.size && !state.seenIds.has(item.id);
  return linkRow(href, [
    h("td", { class: "num" }, rank),
    h("td", { class: "num" }, formatNumber(item.reward)),
    h("td", {}, envName(item.env)),
    h("td", {}, okBadge(item.ok)),
    h("td", { class: "num" }, formatNumber(item.tokens)),
    h("td", { class: "num" }, formatDuration(item.duration)),
    h("td", {}, h("a", { href, tabindex: "-1" }, h("code", {}, item.id))),
  ], { class: fresh ? "link-row fresh" : "link-row", dataset: { reward: item.reward ?? "" } });
}

function render() {
  tbody.replaceChildren(...state.rows.map((item, i) => row(item, i + 1)));
  for (const item of state.rows) state.seenIds.add(item.id);
  el("episodes-empty").hidden = state.rows.length > 0;
  el("episodes-more").hidden = !state.cursor;
  const filtered = ["env", "ok"].some((name) => filters()[name]);
  const parts = [];
  if (state.total) {
    parts.push(`${formatNumber(state.total.count)} ${filters().stream} at this step`);
    parts.push(`mean reward ${formatNumber(state.total.avg_reward)}`);
  }
  parts.push(`showing ${formatNumber(state.rows.length)}${filtered ? " that match the filters" : ""}`);
  if (state.cursor) parts.push("more below");
  el("step-stats").textContent = parts.join(" · ");
}

// The first `limit` rows again (after a filter change, or when the step gained records).
async function reload(limit = PAGE) {
  const page = await api(`${base}/episodes`, { ...filters(), limit: Math.min(limit, 1000) });
  state.rows = page.items;
  state.cursor = page.next_cursor;
  for (const item of page.items) addEnv(item.env);
  render();
}

async function loadMore() {
  if (!state.cursor) return;
  const page = await api(`${base}/episodes`, { ...filters(), limit: PAGE, cursor: state.cursor });
  state.rows.push(...page.items);
  state.cursor = page.next_cursor;
  for (const item of page.items) addEnv(item.env);
  render();
}

async function stepRow(stream) {
  const rows = await api(`${base}/steps`, { stream, step_min: step });
  return rows.find((r) => r.step === step) || { count: 0, avg_reward: null };
}

async function setUp() {
  readUrl();
  const [run, all] = await Promise.all([api(base), api(`${base}/steps`, { stream: filters().stream })]);
  document.title = `Step ${step} · ${runTitle(run)} · openruns`;
  el("run-link").textContent = runTitle(run);
  el("run-link").href = base;
  el("step-label").textContent = `step ${step}`;
  el("step-title").textContent = `${runTitle(run)}: step ${step}`;
  for (const env of run.environments || []) addEnv(envName(env));
  // Neighbouring steps that have records.
  const steps = all.map((r) => r.step).filter((s) => s !== null);
  const prev = steps.filter((s) => s < step).pop();
  const next = steps.find((s) => s > step);
  state.neighbours = { "step-prev": prev, "step-next": next };
  linkNeighbours();
  state.total = all.find((r) => r.step === step) || { count: 0, avg_reward: null };
  await reload();
  for (const id of ["f-sort", "f-env", "f-ok", "f-stream"]) {
    el(id).addEventListener("change", () => {
      writeUrl();
      state.seenIds.clear();
      Promise.all([stepRow(filters().stream).then((t) => { state.total = t; }), reload()]).catch(showError);
    });
  }
  el("episodes-more").addEventListener("click", () => loadMore().catch(showError));
  navigableRows(tbody);
  poll(async () => {
    const total = await stepRow(filters().stream);
    if (total.count !== state.total.count) {
      state.total = total;
      await reload(Math.max(PAGE, state.rows.length));
    }
    const run = await api(base);
    return run.status === "running" || Date.now() / 1000 - (run.finished_at || 0) < AFTER_FINISH_S;
  }, POLL_MS);
}

setUp().catch(showError);
