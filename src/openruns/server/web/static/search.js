// The search page of a run: every record whose text (messages, tool calls and results,
// errors) has all the words asked for, newest first, filtered by stream, kind (train / eval
// work), environment, outcome, step range and reward range, with the matching passages and
// the matches marked. The query lives in the URL, so a search can be shared.

import {
  api, envName, fill, formatNumber, h, marked, okBadge, pathParts, runTitle, showError, showMissing, View,
} from "./common.js";

const PAGE = 20;
const [, runId] = pathParts();
const base = `/runs/${encodeURIComponent(runId)}`;
const el = (id) => document.getElementById(id);
const FIELDS = ["q", "stream", "kind", "env", "ok", "step_min", "step_max", "reward_min", "reward_max"];
const input = (name) => el(name === "q" ? "q" : `f-${name.replace("_", "-")}`);

const state = { cursor: null, shown: 0 };

function query() {
  const out = {};
  for (const name of FIELDS) {
    const value = input(name).value.trim();
    if (value !== "") out[name] = value;
  }
  return out;
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  for (const name of FIELDS) {
    const value = params.get(name);
    if (value === null) continue;
    if (name === "env") addEnv(value);
    input(name).value = value;
  }
}

function addEnv(name) {
  if (!name || [...el("f-env").options].some((o) => o.value === name)) return;
  el("f-env").append(h("option", { value: name }, name));
}

function hit(item) {
  const params = new URLSearchParams();
  if (item.stream !== "episodes") params.set("stream", item.stream);
  const href = `${base}/episodes/${encodeURIComponent(item.id)}${params.size ? `?${params}` : ""}`;
  return h("li", { class: "hit", dataset: { id: item.id } },
    h("div", { class: "hit-head" },
      h("a", { href }, h("code", {}, item.id)), " ",
      item.step !== null ? h("a", { class: "muted", href: `${base}/steps/${item.step}` }, `step ${item.step}`) : h("span", { class: "muted" }, "no step"),
      h("span", { class: "muted" }, ` · reward ${formatNumber(item.reward)} · ${envName(item.env)} `), okBadge(item.ok)),
    item.snippets.map((s) => h("p", { class: "snippet" }, h("span", { class: "badge" }, s.label), " ", marked(s.text, s.matches))));
}

// The hits shown are the newest search's (a search begins a read, "more" joins it): a slow
// answer to the search before never lands over this one (issue 24).
const hitsView = new View();

async function run(more = false) {
  const params = query();
  if (!params.q) return;
  if (!more) history.replaceState(null, "", `?${new URLSearchParams(params)}`);
  const read = more ? hitsView.join() : hitsView.begin();
  const body = await api(`${base}/search`, { ...params, limit: PAGE, cursor: more ? state.cursor : null }, { read });
  if (!more) {
    el("hits").replaceChildren();
    state.shown = 0;
  }
  el("hits").append(...body.items.map(hit));
  state.shown += body.items.length;
  state.cursor = body.next_cursor;
  el("hits-more").hidden = !state.cursor;
  const parts = [state.shown ? `${formatNumber(state.shown)}${state.cursor ? "+" : ""} matching ${params.stream || "episodes"}` : "nothing matches"];
  if (body.pending) parts.push(`${formatNumber(body.pending)} records of this run are not indexed yet (the index is built behind uploads)`);
  el("search-stats").textContent = parts.join(" · ");
  document.body.dataset.searched = String(Date.now());
}

async function main() {
  readUrl();
  const runInfo = await api(base);
  el("run-link").textContent = runTitle(runInfo);
  el("run-link").href = base;
  el("search-title").textContent = `Search rollouts of ${runTitle(runInfo)}`;
  document.title = `Search · ${runTitle(runInfo)} · openruns`;
  for (const env of runInfo.environments || []) addEnv(envName(env));
  readUrl(); // the environment option exists now
  el("search").addEventListener("submit", (event) => {
    event.preventDefault();
    run().catch(showError);
  });
  el("hits-more").addEventListener("click", () => run(true).catch(showError));
  if (query().q) await run();
  else {
    el("q").focus();
    fill(el("search-stats"), "Type words to find in this run's rollouts.");
  }
}

main().catch((error) => showMissing(error, `No run ${runId}`) || showError(error));
