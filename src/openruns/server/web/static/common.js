// Shared by every page: the API client, polling, DOM building, formatting, status badges and
// keyboard-navigable table rows. No dependencies.
//
// Auth: the browser holds a session cookie (HttpOnly, set by signing in at /signin), never an
// API key, so nothing here reads or stores credentials; a 401 sends the page to /signin.

const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The session ended or never began: sign in, then come back here.
function signIn() {
  if (location.pathname === "/signin") return;
  const here = location.pathname + location.search + location.hash;
  location.assign(`/signin?next=${encodeURIComponent(here)}`);
}

async function failure(response) {
  if (response.status === 401) signIn();
  let code = "error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    code = body.error?.code ?? code;
    message = body.error?.message ?? message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message);
}

// GET a JSON (or text) resource. `path` is under /api/v1 unless it starts with "/ui/".
// A 401 sends the page to /signin; other errors throw ApiError with the server's message.
// `read` (a View's read) cancels the request when a newer read of its view begins.
export async function api(path, params = {}, { text = false, read = null } = {}) {
  const url = new URL(path.startsWith("/ui/") ? path : API + path, location.origin);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const response = await fetch(url, { signal: read?.signal });
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  return text ? response.text() : response.json();
}

// PATCH/POST/PUT/DELETE a JSON body under /api/v1; errors as api() throws them.
export async function apiSend(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(API + path, location.origin), init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

// The newest read of a view wins (issue 24). A filter change, a poll and a slider move each
// read what a view shows, and answers come back in any order: a slow read for "all kinds"
// that lands after the one for "eval" must not draw over it. `view.begin()` starts a read and
// abandons every read of the view before it: their requests are cancelled (api() rejects
// with an AbortError, which showError and poll ignore). `view.join()` is a read that
// abandons nothing (a live poll adding to what is shown) and is abandoned all the same.
// `read.current()` is false once a newer read began: checked before drawing an answer that
// waited on something more (Plotly's bundle, a second request).
export class View {
  constructor() {
    this.controller = new AbortController();
  }

  begin() {
    this.controller.abort();
    this.controller = new AbortController();
    return this.join();
  }

  join() {
    const controller = this.controller;
    return { signal: controller.signal, current: () => controller === this.controller };
  }
}

// A read given up because a newer one began: not an error to show.
export function isAbandoned(error) {
  return error instanceof DOMException && error.name === "AbortError";
}

export function apiUrl(path) {
  return API + path;
}

// The header's "Sign out", when this browser is signed in (auth on).
async function setUpSession() {
  const box = document.getElementById("session");
  if (!box) return;
  try {
    // A key kept by an older dashboard: no longer used, not to be left behind.
    localStorage.removeItem("openruns.apiKey");
  } catch {
    // storage disabled: nothing kept
  }
  const session = await api("/session");
  if (!session.signed_in) return;
  document.getElementById("session-team").textContent = `team ${session.team_id}`;
  box.hidden = false;
  document.getElementById("sign-out").addEventListener("click", async () => {
    await apiSend("DELETE", "/session");
    location.assign("/signin");
  });
}

// Export links are plain links: the session cookie goes with them.
export function downloadLink(href, label) {
  return h("a", { href, download: "" }, label);
}

export function showError(error) {
  const banner = document.getElementById("error");
  if (!banner) return;
  if (error instanceof ApiError && error.status === 401) return; // on its way to /signin
  if (isAbandoned(error)) return; // a newer read of the same view took its place
  banner.textContent = error instanceof Error ? error.message : String(error);
  banner.hidden = false;
}

// Show what the page laid out out of sight while its first reads were out (the class
// `awaiting-first-reads`, app.css): shown before them, it moved under the reader's pointer as
// they came in above it.
export function revealFirstReads() {
  for (const part of document.querySelectorAll(".awaiting-first-reads")) part.classList.remove("awaiting-first-reads");
}

// The page's subject is not there (the API answered 404 for it): a page that says so, in
// place of an empty page under the banner (issue 24). True when `error` was that 404.
export function showMissing(error, heading) {
  if (!(error instanceof ApiError && error.status === 404)) return false;
  document.title = `${heading} · openruns`;
  fill(document.getElementById("main"), h("section", { class: "missing", role: "alert" },
    h("h1", {}, heading),
    h("p", {}, `${error.message.charAt(0).toUpperCase()}${error.message.slice(1)}: it was never created on this server, or it belongs to a team this browser is not signed in to.`),
    h("p", {}, h("a", { href: "/" }, "All runs"))));
  clearError();
  return true;
}

function clearError() {
  const banner = document.getElementById("error");
  if (banner) banner.hidden = true;
}

// Call `tick` now and then every `ms` (not while the tab is hidden, and never two at once).
// `tick` returns false to stop. Errors are shown; polling goes on unless the answer was
// 401/403/404.
export function poll(tick, ms) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    if (document.hidden) {
      timer = setTimeout(run, ms);
      return;
    }
    try {
      if ((await tick()) === false) stopped = true;
      else clearError();
    } catch (error) {
      showError(error); // (silent for a read abandoned to a newer one: polling goes on)
      // Not signed in (on the way to /signin), or nothing there: asking again will not help.
      if (error instanceof ApiError && [401, 403, 404].includes(error.status)) stopped = true;
    }
    if (!stopped) timer = setTimeout(run, ms);
  };
  run();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

// h("a", {href, class: "x"}, "text", child...): an element. Strings become text nodes, so
// nothing from the data is ever parsed as HTML. `on*` attributes take functions.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(name, value === true ? "" : value);
    }
  }
  return appendAll(el, children);
}

// Replace an element's children, as h() takes them.
export function fill(el, ...children) {
  el.replaceChildren();
  return appendAll(el, children);
}

// Nested arrays are flattened; null, undefined and false skipped; strings become text.
function appendAll(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

export function okBadge(ok) {
  if (ok === null || ok === undefined) return h("span", { class: "muted" }, "—");
  return h("span", { class: `badge ${ok ? "ok" : "not-ok"}` }, ok ? "ok" : "not ok");
}

export function formatNumber(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (!Number.isFinite(value)) return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return value.toLocaleString("en-US");
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(3);
  return Number(value.toPrecision(4)).toString();
}

// A step's mean reward both ways (a /steps row: count, scored, avg_reward): of the scored
// records (the server's mean: an unscored record is missing), and, when some are unscored,
// counting them as 0, as verifiers and prime-runs average (issue 24; docs/dashboard.md).
// {scored, unscored, asZero}: asZero is null when every record has a reward.
export function rewardMeans(row) {
  const unscored = (row?.count ?? 0) - (row?.scored ?? row?.count ?? 0);
  const asZero = unscored > 0 && row.count ? ((row.avg_reward ?? 0) * row.scored) / row.count : null;
  return { scored: row?.avg_reward ?? null, unscored, asZero };
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const s = Math.round(seconds);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${hh} h`;
  if (hh) return `${hh} h ${mm} min`;
  return `${mm} min ${s % 60} s`;
}

export function formatTime(epoch) {
  if (!epoch) return "—";
  return new Date(epoch * 1000).toLocaleString("sv-SE").slice(0, 19); // 2026-01-31 12:34:56
}

function formatAgo(epoch) {
  if (!epoch) return "—";
  const seconds = Date.now() / 1000 - epoch;
  if (seconds < 45) return "just now";
  return `${formatDuration(seconds).split(" ").slice(0, 2).join(" ")} ago`;
}

export function timeCell(epoch) {
  return h("time", { datetime: epoch ? new Date(epoch * 1000).toISOString() : null,
    title: formatTime(epoch) }, formatAgo(epoch));
}

// How long a run ran (or has been running).
export function runDuration(run) {
  const end = run.finished_at ?? (run.status === "running" ? Date.now() / 1000 : run.updated_at);
  return end - run.created_at;
}

export function runTitle(run) {
  return run.name || run.id;
}

// The end of a run id: ids start with their creation time, so runs made together share a
// prefix and differ at the end.
export function shortId(id) {
  return String(id).slice(-6);
}

// "name · 1a2b3c": what legends and chips say, so two runs of one name stay apart.
export function runLabel(run) {
  return run.name ? `${run.name} · ${shortId(run.id)}` : run.id;
}

// Preferences kept in this browser (local storage), as JSON; `fallback` when unset or unreadable.
export const prefs = {
  get(name, fallback) {
    try {
      const text = localStorage.getItem(`openruns.${name}`);
      return text === null ? fallback : JSON.parse(text);
    } catch {
      return fallback;
    }
  },
  set(name, value) {
    try {
      localStorage.setItem(`openruns.${name}`, JSON.stringify(value));
    } catch {
      // storage full or disabled: the preference lasts for this page only
    }
  },
};

// Text with the [start, end) ranges in `matches` wrapped in <mark>, as DOM nodes.
export function marked(text, matches) {
  const out = [];
  let at = 0;
  for (const [start, end] of matches) {
    if (start < at) continue;
    out.push(text.slice(at, start), h("mark", {}, text.slice(start, end)));
    at = end;
  }
  out.push(text.slice(at));
  return out;
}

export function envName(env) {
  if (env === null || env === undefined) return "—";
  if (typeof env === "string") return env;
  return env.name || env.id || JSON.stringify(env);
}

// Flatten {a: {b: 1}} to {"a/b": 1}, keeping numbers only.
// Summary keys the prime-runs SDK keeps for itself (prime_runs/traces_episodes_written): stored
// with the run, not shown as its summary (issue 24).
export function isInternalKey(path) {
  return path === "prime_runs" || path.startsWith("prime_runs/");
}

export function numericLeaves(value, prefix = "", out = {}) {
  if (isInternalKey(prefix)) return out;
  if (typeof value === "number") out[prefix] = value;
  else if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) numericLeaves(v, prefix ? `${prefix}/${k}` : k, out);
  }
  return out;
}

// Make a table body navigable: rows are focusable, ArrowUp/ArrowDown/Home/End move between
// them, Enter (or a click outside a control) opens the row's data-href.
export function navigableRows(tbody) {
  tbody.addEventListener("keydown", (event) => {
    const row = event.target.closest("tr");
    if (!row || event.target !== row) return;
    const rows = [...tbody.querySelectorAll("tr[tabindex]")];
    const i = rows.indexOf(row);
    let next = null;
    if (event.key === "ArrowDown") next = rows[i + 1];
    else if (event.key === "ArrowUp") next = rows[i - 1];
    else if (event.key === "Home") next = rows[0];
    else if (event.key === "End") next = rows[rows.length - 1];
    else if (event.key === "Enter" && row.dataset.href) location.href = row.dataset.href;
    else return;
    event.preventDefault();
    next?.focus();
  });
  tbody.addEventListener("click", (event) => {
    const row = event.target.closest("tr[data-href]");
    if (!row || event.target.closest("a, button, input, label, select")) return;
    if (event.ctrlKey || event.metaKey) window.open(row.dataset.href, "_blank");
    else location.href = row.dataset.href;
  });
}

export function linkRow(href, cells, attrs = {}) {
  return h("tr", { tabindex: "0", "data-href": href, class: "link-row", ...attrs }, cells);
}

// Path segments after a prefix, decoded: pathParts() on /runs/a/steps/3 -> ["runs","a","steps","3"].
export function pathParts() {
  return location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
}

setUpSession().catch(showError);
