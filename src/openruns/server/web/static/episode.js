// The episode page: one stored record drawn as chats (chat.js reads every common shape: a
// verifiers episode or trace, OpenAI messages, prompt/completion lists or strings; anything
// else as a JSON tree), with the previous and next records of its step (links and keys, in
// the order and filters of the step page that led here), the annotations other producers
// (a trainer) logged about it, by producer, and a pin for the side-by-side view.

import {
  api, fill, formatNumber, formatTime, h, pathParts, prefs, revealFirstReads, runTitle, showError, showMissing,
} from "./common.js";
import { errorsList, loadRecord, recordFacts, renderChat } from "./chat.js";
import { foldText, json, jsonTree } from "./render.js";

// The id is the rest of the path: an id may hold "/" (gsm8k/12), encoded or not.
const [, runId, , ...idParts] = pathParts();
const episodeId = idParts.join("/");
const base = `/runs/${encodeURIComponent(runId)}`;
const el = (id) => document.getElementById(id);
const LIST_PAGES = 10; // of 1000 rows: how far the neighbours are looked for

const by = new URLSearchParams(location.search).get("by") === "trained" ? "trained" : "dispatched";
const stream = new URLSearchParams(location.search).get("stream") || "episodes";

// The step the record was dispatched at: its own, else its index row's (an eval episode
// names none: the index took the run's step when it was logged, and the step page lists it
// there, so previous and next follow from it too: issue 24).
function stepOf(record, row) {
  return record.run?.work?.step ?? record.step ?? row?.step ?? null;
}

function trainedStepOf(record, row) {
  return record.annotations?.trained_step ?? row?.trained_step ?? null;
}

// The step this page belongs to: dispatched at, or trained at when the step page said so.
function pageStep(record, row) {
  return by === "trained" ? trainedStepOf(record, row) : stepOf(record, row);
}

function trainedFact(record, row) {
  const trained = trainedStepOf(record, row);
  if (trained === null) return null;
  const dispatched = stepOf(record, row);
  const lag = dispatched === null ? null : trained - dispatched;
  return ["Trained at", h("span", {}, `step ${trained}`, lag ? [" ", h("span", { class: "badge off-policy" }, `off-policy: dispatched at step ${dispatched}`)] : null)];
}

function header(record, row, run, kind) {
  const step = pageStep(record, row);
  if (step !== null) {
    el("step-link").textContent = `step ${step}${by === "trained" ? " (trained at)" : ""}`;
    el("step-link").href = `${base}/steps/${step}${location.search}`;
  } else {
    el("step-link").replaceWith(h("span", {}, "no step"));
  }
  const noun = { episode: "Episode", trace: "Trace", chat: "Chat", other: "Record" }[kind];
  fill(el("episode-header"),
    h("h1", {}, `${noun} `, h("code", {}, record.id || episodeId)),
    h("dl", { class: "facts" }, [...recordFacts(record, row), trainedFact(record, row)].filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    kind === "episode" ? errorsList(record.errors, "Episode errors") : null,
    record.task ? h("details", { class: "task" }, h("summary", {}, `Task${record.task.type ? ` (${record.task.type})` : ""}`), jsonTree(record.task)) : null,
  );
  document.title = `${noun} ${record.id || episodeId} · ${runTitle(run)} · openruns`;
}

// The step's records in the step page's order and filters (from this page's query string).
async function neighbours(step) {
  const params = new URLSearchParams(location.search);
  const query = {
    step,
    sort: params.get("sort") || "-reward",
    env: params.get("env"),
    ok: params.get("ok"),
    stream,
    by,
    kind: params.get("kind"),
    subset: params.get("subset"),
    limit: 1000,
  };
  let ids = [];
  let cursor = null;
  for (let page = 0; page < LIST_PAGES; page++) {
    const body = await api(`${base}/episodes`, { ...query, cursor });
    ids = ids.concat(body.items.map((item) => item.id));
    cursor = body.next_cursor;
    if (!cursor || ids.includes(episodeId)) break;
  }
  const i = ids.indexOf(episodeId);
  if (i < 0) return;
  const link = (id) => `${base}/episodes/${encodeURIComponent(id)}${location.search}`;
  el("position").textContent = `${i + 1} of ${ids.length}${cursor ? "+" : ""} at this step`;
  if (i > 0) Object.assign(el("prev-episode"), { hidden: false, href: link(ids[i - 1]) });
  if (i + 1 < ids.length) Object.assign(el("next-episode"), { hidden: false, href: link(ids[i + 1]) });
}

function setUpKeys() {
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if (event.target.closest?.("input, textarea, select, [contenteditable]")) return;
    const id = { ArrowLeft: "prev-episode", k: "prev-episode", ArrowRight: "next-episode", j: "next-episode" }[event.key];
    const link = id && el(id);
    if (!link || link.hidden) return;
    event.preventDefault();
    location.href = link.href;
  });
}

// One record pinned in this browser; any other episode page offers the pair.
function setUpPin(run) {
  const pinned = prefs.get("pinned", null);
  const mine = pinned && pinned.run === runId && pinned.id === episodeId;
  const button = el("pin");
  button.textContent = mine ? "Unpin" : "Pin for side by side";
  button.addEventListener("click", () => {
    if (mine) prefs.set("pinned", null);
    else prefs.set("pinned", { run: runId, id: episodeId, label: `${runTitle(run)} · ${episodeId.slice(0, 8)}` });
    setUpPinLabel();
  });
  const setUpPinLabel = () => {
    const now = prefs.get("pinned", null);
    const same = now && now.run === runId && now.id === episodeId;
    button.textContent = same ? "Unpin" : "Pin for side by side";
    const pair = el("pair-link");
    pair.hidden = !now || same;
    if (now && !same) {
      const params = new URLSearchParams({ run_a: now.run, a: now.id, run_b: runId, b: episodeId });
      pair.href = `/compare/episodes?${params}`;
      pair.textContent = `Side by side with the pinned ${now.label}`;
    }
  };
  setUpPinLabel();
}

// The annotations about this record, by producer, oldest first: what each said (its info, the
// step it trained the record at, per-branch streams), as the fold above merged them.
async function annotations(record) {
  const section = el("annotations");
  if (!record.annotations?.count) return;
  const items = [];
  let cursor = null;
  do {
    const page = await api(`${base}/annotations`, { episode_id: episodeId, limit: 1000, cursor });
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < 5000);
  const producers = new Map();
  for (const item of items) {
    if (!producers.has(item.producer)) producers.set(item.producer, []);
    producers.get(item.producer).push(item);
  }
  fill(section,
    h("h2", {}, "Annotations ", h("span", { class: "muted" }, `(${formatNumber(items.length)} from ${[...producers.keys()].join(", ")})`)),
    h("p", { class: "muted" }, "Facts other processes logged about this record after it was stored; the chats above show them merged in (newest last)."),
    [...producers].map(([producer, rows]) => h("section", { class: "producer", dataset: { producer } },
      h("h3", {}, producer),
      h("table", { class: "grid annotations" },
        h("thead", {}, h("tr", {}, ["Time", "Trained at", "About", "Info", "Branches"].map((name) => h("th", { scope: "col" }, name)))),
        h("tbody", {}, rows.map((row) => h("tr", {},
          h("td", {}, formatTime(row.ts)),
          h("td", { class: "num" }, row.step ?? "—"),
          h("td", {}, row.trace_id ? ["trace ", h("code", {}, row.trace_id)] : "the episode"),
          h("td", {}, row.info && Object.keys(row.info).length ? jsonTree(row.info) : h("span", { class: "muted" }, "—")),
          h("td", {}, (row.branches || []).length
            ? `${row.branches.length} (${[...new Set(row.branches.flatMap((b) => Object.keys(b).filter((k) => k !== "index")))].join(", ")})`
            : h("span", { class: "muted" }, "—")),
        ))),
      ),
    )),
  );
  section.hidden = false;
}

// An episode without a trace (it failed before any agent ran): what it was asked, from its task.
function untraced(record) {
  const prompt = record.task?.data?.prompt;
  return h("section", { class: "trace untraced" }, h("h2", {}, "No trace was recorded"),
    h("p", { class: "muted" }, "The episode ended before any agent produced a trace; its task's prompt:"),
    typeof prompt === "string" ? foldText(prompt) : prompt ? jsonTree(prompt) : h("p", { class: "muted" }, "(the task has no prompt)"));
}

async function main() {
  const [run, { record, row, kind, chats }] = await Promise.all([api(base), loadRecord(base, episodeId, stream)]);
  el("run-link").textContent = runTitle(run);
  el("run-link").href = base;
  header(record, row, run, kind);
  const heading = kind === "episode" ? "Trace" : kind === "trace" ? "Trace" : "Chat";
  el("traces").replaceChildren(...(kind === "other"
    ? [h("section", { class: "trace unknown" }, h("h2", {}, "Record"),
      h("p", { class: "muted" }, "Not a chat of a known shape: its fields, as stored."), jsonTree(record))]
    : kind === "episode" && !chats.length ? [untraced(record)]
      : chats.map((chat, i) => renderChat(chat, { scope: "t", heading, count: chats.length, index: i, runId }))));
  // The raw record can be megabytes: built only when asked for.
  el("raw").addEventListener("toggle", () => {
    if (el("raw").open && !el("raw-body").textContent) el("raw-body").textContent = json(record);
  });
  setUpPin(run);
  setUpKeys();
  // The raw record's toggle is shown once the record and its annotations are drawn above it:
  // before, it sat under the nav and moved down with them, under a pointer aimed at it.
  annotations(record).catch(showError).finally(revealFirstReads);
  const step = pageStep(record, row);
  if (step !== null) await neighbours(step);
}

main().catch((error) => showMissing(error, "Not found") || showError(error));
