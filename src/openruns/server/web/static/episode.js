// The episode page: one stored record (an episode with its traces, or a bare trace), as the
// verifiers data model shapes it: per trace the messages by role with tool calls and their
// results, rewards, metrics, timing, errors. Long texts are folded behind a button that says
// how much is hidden; nothing is cut without saying so, and the whole record is one click away.

import {
  api, fill, envName, formatDuration, formatNumber, formatTime, h, okBadge, pathParts, runTitle,
  showError,
} from "./common.js";

const FOLD_CHARS = 1500;
const FOLD_LINES = 24;

const [, runId, , episodeId] = pathParts();
const base = `/runs/${encodeURIComponent(runId)}`;
const el = (id) => document.getElementById(id);

// A block of text, folded when long: the first FOLD_LINES lines / FOLD_CHARS characters and
// a button naming what is hidden.
function foldText(text, className = "text") {
  text = String(text ?? "");
  const lines = text.split("\n");
  let cut = text.length;
  if (lines.length > FOLD_LINES) cut = lines.slice(0, FOLD_LINES).join("\n").length;
  if (cut > FOLD_CHARS) {
    // Cut at a line break, else a space, near the limit rather than inside a word.
    const head = text.slice(0, FOLD_CHARS);
    const line = head.lastIndexOf("\n");
    const space = head.lastIndexOf(" ");
    const enough = FOLD_CHARS * 0.6;
    cut = line > enough ? line : space > enough ? space : FOLD_CHARS;
  }
  const pre = h("pre", { class: className }, text);
  if (cut >= text.length) return pre;
  const hiddenChars = text.length - cut;
  const hiddenLines = text.slice(cut).split("\n").length - 1;
  const head = text.slice(0, cut);
  pre.textContent = head;
  const more = `Show all (${formatNumber(hiddenChars)} more characters${hiddenLines ? `, ${formatNumber(hiddenLines)} more lines` : ""})`;
  const button = h("button", { type: "button", class: "fold", "aria-expanded": "false" }, more);
  button.addEventListener("click", () => {
    const open = button.getAttribute("aria-expanded") === "true";
    pre.textContent = open ? head : text;
    button.setAttribute("aria-expanded", String(!open));
    button.textContent = open ? more : "Show less";
  });
  return h("div", { class: "folded" }, pre, button);
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

// A mapping as a small table; nested values as folded JSON.
function kvTable(mapping, caption) {
  const rows = Object.entries(mapping || {}).map(([k, v]) => h("tr", {},
    h("th", { scope: "row" }, k),
    h("td", { class: typeof v === "number" ? "num" : "" },
      typeof v === "number" ? formatNumber(v) : v && typeof v === "object" ? foldText(json(v), "json") : String(v))));
  if (!rows.length) return null;
  return h("table", { class: "grid kv" }, caption ? h("caption", {}, caption) : null, h("tbody", {}, rows));
}

function rewardsTable(rewards) {
  const rows = Object.entries(rewards || {}).map(([name, r]) => h("tr", {},
    h("th", { scope: "row" }, name),
    r ? [h("td", { class: "num" }, formatNumber(r.score)), h("td", { class: "num" }, formatNumber(r.weight ?? 1)),
      h("td", { class: "num" }, formatNumber((r.score ?? 0) * (r.weight ?? 1)))]
      : h("td", { colspan: "3", class: "muted" }, "not scored")));
  if (!rows.length) return null;
  return h("table", { class: "grid kv rewards" },
    h("caption", {}, "Rewards"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "name"), h("th", { scope: "col", class: "num" }, "score"),
      h("th", { scope: "col", class: "num" }, "weight"), h("th", { scope: "col", class: "num" }, "score × weight"))),
    h("tbody", {}, rows));
}

// Timing spans ({start, end} or {duration}) flattened to rows: name, start offset, duration.
function timingTable(timing) {
  if (!timing) return null;
  const origin = typeof timing.start === "number" ? timing.start : null;
  const rows = [];
  const walk = (node, path) => {
    for (const [k, v] of Object.entries(node)) {
      if (!v || typeof v !== "object") continue;
      const name = path ? `${path}.${k}` : k;
      const duration = typeof v.duration === "number" ? v.duration
        : typeof v.start === "number" && typeof v.end === "number" ? v.end - v.start : null;
      if (duration !== null) {
        const offset = origin && v.start ? formatDuration(v.start - origin) : "";
        rows.push(h("tr", {}, h("th", { scope: "row" }, name), h("td", { class: "num" }, offset),
          h("td", { class: "num" }, formatDuration(duration))));
      }
      walk(v, name);
    }
  };
  walk(timing, "");
  return h("table", { class: "grid kv timing" },
    h("caption", {}, origin ? `Timing (from ${formatTime(origin)})` : "Timing"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "span"), h("th", { scope: "col", class: "num" }, "starts after"),
      h("th", { scope: "col", class: "num" }, "duration"))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: "3" }, foldText(json(timing), "json")))));
}

function errorsList(errors, title) {
  if (!errors || !errors.length) return null;
  return h("div", { class: "error-box" }, h("strong", {}, title),
    errors.map((e) => h("div", { class: "error-item" },
      h("p", {}, h("code", {}, e.type || "error"), e.status_code ? ` (HTTP ${e.status_code})` : "", ": ", e.message || ""),
      e.traceback ? h("details", {}, h("summary", {}, "traceback"), foldText(e.traceback, "text")) : null)));
}

// Message content: a string, or a list of parts ({type: "text", text} and others).
function contentBlock(content) {
  if (content === null || content === undefined || content === "") return h("p", { class: "muted" }, "(no content)");
  if (typeof content === "string") return foldText(content);
  if (Array.isArray(content)) {
    return h("div", {}, content.map((part) => (part?.type === "text" && typeof part.text === "string"
      ? foldText(part.text)
      : h("div", { class: "part" }, h("span", { class: "muted" }, `${part?.type || "part"}: `), foldText(json(part), "json")))));
  }
  return foldText(json(content), "json");
}

function toolCall(call, traceIndex) {
  const fn = call.function || {};
  let args = fn.arguments;
  try {
    args = json(JSON.parse(args));
  } catch {
    // not JSON: show it as sent
  }
  return h("div", { class: "tool-call", id: `call-${traceIndex}-${call.id}` },
    h("div", {}, h("span", { class: "badge tool" }, "tool call"), " ", h("code", {}, fn.name || call.type || "?"),
      call.id ? h("span", { class: "muted" }, ` id ${call.id}`) : null),
    typeof args === "string" ? foldText(args, "json") : foldText(json(args ?? {}), "json"));
}

const KNOWN_MESSAGE_FIELDS = new Set(["role", "content", "tool_calls", "tool_call_id", "name"]);

function messageCard(node, index, traceIndex, callNames) {
  const m = node.message || {};
  const role = m.role || "unknown";
  const extras = Object.entries(m).filter(([k, v]) => !KNOWN_MESSAGE_FIELDS.has(k) && v !== null && v !== undefined);
  const tokens = Array.isArray(node.token_ids) ? node.token_ids.length : null;
  const sampled = Array.isArray(node.mask) ? node.mask.filter(Boolean).length : null;
  const parentNote = node.parent !== undefined && node.parent !== null && node.parent !== index - 1
    ? h("span", { class: "muted" }, ` reply to #${node.parent}`) : null;
  return h("article", { class: `message role-${role.replace(/[^a-z_]/gi, "")}`, dataset: { role } },
    h("header", {},
      h("span", { class: "role" }, role), m.name ? h("span", { class: "muted" }, ` (${m.name})`) : null,
      h("span", { class: "muted" }, ` #${index}`), parentNote,
      node.sampled ? h("span", { class: "badge sampled" }, "sampled") : null,
      m.tool_call_id ? h("a", { class: "muted", href: `#call-${traceIndex}-${m.tool_call_id}` },
        ` result of ${callNames.get(m.tool_call_id) || "call"} ${m.tool_call_id}`) : null,
      tokens !== null ? h("span", { class: "muted right" }, `${formatNumber(tokens)} tokens${sampled !== null ? `, ${formatNumber(sampled)} trained` : ""}`) : null),
    extras.map(([k, v]) => h("div", { class: "extra" }, h("span", { class: "muted" }, k), typeof v === "string" ? foldText(v) : foldText(json(v), "json"))),
    contentBlock(m.content),
    (m.tool_calls || []).map((call) => toolCall(call, traceIndex)));
}

function traceSection(trace, index, count) {
  const agent = trace.agent || {};
  const callNames = new Map();
  for (const node of trace.nodes || []) {
    for (const call of node.message?.tool_calls || []) callNames.set(call.id, call.function?.name || "call");
  }
  const facts = [
    ["Reward", formatNumber(trace.reward)],
    ["Outcome", [okBadge(trace.ok ?? (trace.errors?.length ? false : null)), trace.stop_condition ? ` stop: ${trace.stop_condition}` : ""]],
    ["Completed", trace.is_completed === undefined ? "—" : String(trace.is_completed)],
    ["Tokens", `${formatNumber(trace.num_input_tokens)} in · ${formatNumber(trace.num_output_tokens)} out · ${formatNumber(trace.num_total_tokens)} total`],
    ["Messages", formatNumber((trace.nodes || []).length)],
  ];
  const tools = trace.tools || [];
  return h("section", { class: "trace", id: `trace-${index}` },
    h("h2", {}, count > 1 ? `Trace ${index + 1} of ${count}: ` : "Trace: ", agent.name || "agent",
      agent.trainable === false ? h("span", { class: "badge" }, "not trained") : null),
    h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    errorsList(trace.errors, "Trace errors"),
    h("div", { class: "tables" }, rewardsTable(trace.rewards), kvTable(trace.metrics, "Metrics"), timingTable(trace.timing)),
    tools.length ? h("details", {}, h("summary", {}, `Tools advertised (${tools.length})`), foldText(json(tools), "json")) : null,
    h("div", { class: "messages" }, (trace.nodes || []).map((node, i) => messageCard(node, i, index, callNames))),
    trace.info && Object.keys(trace.info).length ? h("details", {}, h("summary", {}, "info"), foldText(json(trace.info), "json")) : null,
    trace.calls?.length ? h("details", {}, h("summary", {}, `Model calls (${trace.calls.length})`), foldText(json(trace.calls), "json")) : null);
}

function header(record, run) {
  const step = record.run?.work?.step ?? record.step ?? null;
  if (step !== null) {
    el("step-link").textContent = `step ${step}`;
    el("step-link").href = `${base}/steps/${step}`;
  } else {
    el("step-link").replaceWith(h("span", {}, "no step"));
  }
  const traces = record.traces || [];
  const total = (name) => record[name] ?? traces.reduce((a, t) => a + (t[name] || 0), 0);
  const facts = [
    ["Environment", envName(record.env)],
    ["Outcome", okBadge(record.ok)],
    ["Step", step ?? "—"],
    ["Work", record.run?.work?.type || record.run?.type || "—"],
    ["Tokens", `${formatNumber(total("num_input_tokens"))} in · ${formatNumber(total("num_output_tokens"))} out · ${formatNumber(total("num_total_tokens"))} total`],
    ["Traces", formatNumber(traces.length)],
  ];
  if (record.group?.id) facts.push(["Group", h("code", {}, record.group.id)]);
  if (record.is_timeout) facts.push(["Timed out", "yes"]);
  fill(el("episode-header"),
    h("h1", {}, record.traces ? "Episode " : "Trace ", h("code", {}, record.id || episodeId)),
    h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    errorsList(record.errors, "Episode errors"),
    record.task ? h("details", { class: "task" }, h("summary", {}, `Task${record.task.type ? ` (${record.task.type})` : ""}`), foldText(json(record.task), "json")) : null,
  );
  document.title = `Episode ${record.id || episodeId} · ${runTitle(run)} · openruns`;
}

async function main() {
  const [run, record] = await Promise.all([api(base), api(`${base}/episodes/${encodeURIComponent(episodeId)}`)]);
  el("run-link").textContent = runTitle(run);
  el("run-link").href = base;
  header(record, run);
  const traces = Array.isArray(record.traces) ? record.traces : [record]; // a bare trace
  el("traces").replaceChildren(...traces.map((t, i) => traceSection(t, i, traces.length)));
  // The raw record can be megabytes: built only when asked for.
  el("raw").addEventListener("toggle", () => {
    if (el("raw").open && !el("raw-body").textContent) el("raw-body").textContent = json(record);
  });
}

main().catch(showError);
