// Every common shape of a rollout, read as chats and drawn the same way:
//
//   verifiers episode  {traces: [{nodes: [{message, sampled, token_ids, mask}], rewards, ...}]}
//   verifiers trace    {nodes: [...]}
//   OpenAI chat        {messages: [{role, content, tool_calls}, {role: "tool", tool_call_id}]}
//   prompt/completion  {prompt: [messages], completion: [messages]}  (verifiers rollouts, TRL)
//   plain strings      {prompt: "...", completion: "...", answer: "..."}
//   anything else      a collapsible JSON tree
//
// readRecord(record) gives {kind, chats}; renderChat(chat, ...) draws one, with tool calls
// linked to their results in both directions.

import { api, apiUrl, envName, formatDuration, formatNumber, formatTime, h, okBadge } from "./common.js";
import { foldText, json, jsonTree, kvTable } from "./render.js";

const KNOWN_MESSAGE_FIELDS = new Set(["role", "content", "tool_calls", "tool_call_id", "name"]);
const CHAT_FIELDS = new Set(["messages", "prompt", "completion", "question", "response", "answer"]);

const isList = (v) => Array.isArray(v);
const isMessages = (v) => isList(v) && v.length > 0 && v.every((m) => m && typeof m === "object" && typeof m.role === "string");
const isText = (v) => typeof v === "string";

// {kind: "episode" | "trace" | "chat" | "other", chats: [...]}
export function readRecord(record) {
  if (record && typeof record === "object" && !isList(record)) {
    if (isList(record.traces)) return { kind: "episode", chats: record.traces.map(traceChat) };
    if (isList(record.nodes)) return { kind: "trace", chats: [traceChat(record)] };
    const chat = plainChat(record);
    if (chat) return { kind: "chat", chats: [chat] };
  }
  return { kind: "other", chats: [] };
}

function traceChat(trace) {
  const nodes = isList(trace?.nodes) ? trace.nodes : [];
  return {
    title: trace?.agent?.name || "agent",
    trainable: trace?.agent?.trainable,
    reward: trace?.reward,
    ok: trace?.ok ?? (trace?.errors?.length ? false : null),
    stop: trace?.stop_condition,
    completed: trace?.is_completed,
    tokens: [trace?.num_input_tokens, trace?.num_output_tokens, trace?.num_total_tokens],
    rewards: trace?.rewards,
    metrics: trace?.metrics,
    timing: trace?.timing,
    errors: trace?.errors,
    tools: trace?.tools || [],
    info: trace?.info,
    calls: trace?.calls,
    messages: nodes.map((node, i) => ({
      ...(node?.message || {}),
      index: i,
      parent: node?.parent,
      sampled: Boolean(node?.sampled),
      tokens: isList(node?.token_ids) ? node.token_ids.length : null,
      trained: isList(node?.mask) ? node.mask.filter(Boolean).length : null,
    })),
  };
}

// A record that holds its chat directly: `messages`, or `prompt`/`completion` as message lists
// or strings. null when it has none of these.
function plainChat(record) {
  const messages = [];
  const take = (value, role, sampled) => {
    if (isMessages(value)) for (const m of value) messages.push({ ...m, sampled });
    else if (isText(value)) messages.push({ role, content: value, sampled });
  };
  if (isMessages(record.messages)) take(record.messages, "user", false);
  else {
    take(record.prompt ?? record.question, "user", false);
    take(record.completion ?? record.response, "assistant", true);
  }
  if (!messages.length) return null;
  const rest = Object.fromEntries(Object.entries(record).filter(([k]) => !CHAT_FIELDS.has(k)));
  return {
    title: "chat",
    reward: record.reward,
    ok: record.ok ?? null,
    answer: record.answer,
    rewards: isRewardMap(record.rewards) ? record.rewards : null,
    metrics: record.metrics,
    errors: isList(record.errors) ? record.errors : isText(record.error) ? [{ message: record.error }] : null,
    tools: isList(record.tools) ? record.tools : [],
    rest,
    messages: messages.map((m, i) => ({ ...m, index: i })),
  };
}

function isRewardMap(value) {
  return value && typeof value === "object" && !isList(value)
    && Object.values(value).every((r) => r === null || (typeof r === "object" && "score" in r));
}

// A stored record as the episode and side-by-side pages draw it: the record, its index row
// (the step it was indexed at: an eval episode stamps none of its own, and the index took the
// run's step when it was logged; its reward as the index reads it), and its chats, each
// trace's reward filled in by the server's rule where the record has none (verifiers 0.4.0
// serializes `rewards`, never `Trace.reward`; the rule is written once, in records.py: an
// episode's traces' rewards come from /previews, a bare trace's or a chat's is its row's:
// issue 24).
export async function loadRecord(base, id, stream = "episodes") {
  const [record, rows, previews] = await Promise.all([
    api(`${base}/episodes/${encodeURIComponent(id)}`),
    api(`${base}/episodes`, { id, stream, limit: 1 }),
    api(`${base}/previews`, { ids: id }),
  ]);
  const { kind, chats } = readRecord(record);
  const row = rows.items[0] || null;
  const rewards = kind === "episode" ? previews[id]?.trace_rewards || [] : [row?.reward];
  chats.forEach((chat, i) => { chat.reward ??= rewards[i] ?? null; });
  return { record, row, kind, chats };
}

// -- drawing ----------------------------------------------------------------------------------

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
  if (!timing || typeof timing !== "object") return null;
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
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: "3" }, jsonTree(timing)))));
}

export function errorsList(errors, title) {
  if (!isList(errors) || !errors.length) return null;
  return h("div", { class: "error-box" }, h("strong", {}, title),
    errors.map((e) => h("div", { class: "error-item" },
      h("p", {}, h("code", {}, e?.type || "error"), e?.status_code ? ` (HTTP ${e.status_code})` : "", ": ", e?.message || ""),
      e?.traceback ? h("details", {}, h("summary", {}, "traceback"), foldText(e.traceback, "text")) : null)));
}

// Message content: a string, or a list of parts ({type: "text", text}, {type: "image_url"} and
// others).
function contentBlock(content, runId) {
  if (content === null || content === undefined || content === "") return h("p", { class: "muted" }, "(no content)");
  if (isText(content)) return foldText(content);
  if (isList(content)) {
    return h("div", {}, content.map((part) => {
      if (part?.type === "text" && isText(part.text)) return foldText(part.text);
      if (part?.type === "image_url") return imagePart(part, runId);
      return h("div", { class: "part" }, h("span", { class: "muted" }, `${part?.type || "part"}: `), jsonTree(part));
    }));
  }
  return jsonTree(content);
}

// Where the page loads an image from: a run's media path (`media/...`: the images of W&B
// tables and history, server/wandb/media.py) from the run's media route, a data: URL as it
// is, a same-origin path as it is; null for another host (the dashboard works air-gapped, and
// its Content-Security-Policy loads images from this origin only).
export function mediaSrc(url, runId) {
  if (!isText(url)) return null;
  if (url.startsWith("data:image/") || (url.startsWith("/") && !url.startsWith("//"))) return url;
  if (url.startsWith("media/") && runId) {
    return apiUrl(`/runs/${encodeURIComponent(runId)}/media/${url.split("/").map(encodeURIComponent).join("/")}`);
  }
  return null;
}

function imagePart(part, runId) {
  const url = isText(part.image_url) ? part.image_url : part.image_url?.url;
  const src = mediaSrc(url, runId);
  const caption = isText(part.caption) ? part.caption : null;
  return h("figure", { class: "part image" },
    src ? h("img", { src, alt: caption || "image", loading: "lazy" })
      : h("p", { class: "muted" }, "image not loaded: ", h("code", {}, isText(url) ? url.slice(0, 200) : "?")),
    caption ? h("figcaption", {}, caption) : null);
}

// Anchors of a chat's tool calls and results: unique on the page (`scope` names the chat).
const callAnchor = (scope, id) => `call-${scope}-${id}`;
const resultAnchor = (scope, id) => `result-${scope}-${id}`;

function toolCall(call, scope, answered) {
  const fn = call?.function || {};
  let args = fn.arguments;
  if (isText(args)) {
    try {
      args = JSON.parse(args);
    } catch {
      // not JSON: shown as sent
    }
  }
  return h("div", { class: "tool-call", id: call?.id ? callAnchor(scope, call.id) : null },
    h("div", {}, h("span", { class: "badge tool" }, "tool call"), " ", h("code", {}, fn.name || call?.type || "?"),
      call?.id ? h("span", { class: "muted" }, ` id ${call.id}`) : null,
      call?.id && answered.has(call.id) ? [" ", h("a", { class: "to-result", href: `#${resultAnchor(scope, call.id)}` }, "result ↓")] : null),
    isText(args) ? foldText(args, "json") : foldText(json(args ?? {}), "json"));
}

function messageCard(m, scope, callNames, answered, runId) {
  const role = m.role || "unknown";
  const extras = Object.entries(m).filter(([k, v]) => !KNOWN_MESSAGE_FIELDS.has(k) && !MESSAGE_META.has(k) && v !== null && v !== undefined);
  const parentNote = m.parent !== undefined && m.parent !== null && m.parent !== m.index - 1
    ? h("span", { class: "muted" }, ` reply to #${m.parent}`) : null;
  const result = m.tool_call_id ? resultAnchor(scope, m.tool_call_id) : null;
  return h("article", { class: `message role-${role.replace(/[^a-z_]/gi, "")}`, id: result, dataset: { role } },
    h("header", {},
      h("span", { class: "role" }, role), m.name ? h("span", { class: "muted" }, ` (${m.name})`) : null,
      h("span", { class: "muted" }, ` #${m.index}`), parentNote,
      m.sampled ? h("span", { class: "badge sampled" }, "sampled") : null,
      m.tool_call_id ? [" ", h("a", { class: "muted to-call", href: `#${callAnchor(scope, m.tool_call_id)}` },
        `result of ${callNames.get(m.tool_call_id) || "call"} ${m.tool_call_id} ↑`)] : null,
      m.tokens !== null && m.tokens !== undefined
        ? h("span", { class: "muted right" }, `${formatNumber(m.tokens)} tokens${m.trained !== null ? `, ${formatNumber(m.trained)} trained` : ""}`) : null),
    extras.map(([k, v]) => h("div", { class: "extra" }, h("span", { class: "muted" }, k), isText(v) ? foldText(v) : jsonTree(v))),
    contentBlock(m.content, runId),
    (isList(m.tool_calls) ? m.tool_calls : []).map((call) => toolCall(call, scope, answered)));
}

const MESSAGE_META = new Set(["index", "parent", "sampled", "tokens", "trained"]);

// One chat: its facts, errors, rewards/metrics/timing, then the messages in order. `scope`
// keeps its anchors apart from another chat's on the same page; `runId` is the run whose
// media its images are.
export function renderChat(chat, { scope, heading, count = 1, index = 0, runId = null }) {
  const callNames = new Map();
  const answered = new Set();
  for (const m of chat.messages) {
    for (const call of isList(m.tool_calls) ? m.tool_calls : []) callNames.set(call?.id, call?.function?.name || "call");
    if (m.tool_call_id) answered.add(m.tool_call_id);
  }
  const [tokensIn, tokensOut, tokensTotal] = chat.tokens || [];
  const facts = [
    ["Reward", formatNumber(chat.reward)],
    ["Outcome", [okBadge(chat.ok), chat.stop ? ` stop: ${chat.stop}` : ""]],
    chat.completed === undefined ? null : ["Completed", String(chat.completed)],
    chat.tokens ? ["Tokens", `${formatNumber(tokensIn)} in · ${formatNumber(tokensOut)} out · ${formatNumber(tokensTotal)} total`] : null,
    chat.answer !== undefined ? ["Expected answer", isText(chat.answer) ? chat.answer : JSON.stringify(chat.answer)] : null,
    ["Messages", formatNumber(chat.messages.length)],
  ].filter(Boolean);
  const tools = chat.tools || [];
  const title = count > 1 ? `${heading} ${index + 1} of ${count}: ` : `${heading}: `;
  return h("section", { class: "trace", id: `${scope}-${index}` },
    h("h2", {}, title, chat.title, chat.trainable === false ? h("span", { class: "badge" }, "not trained") : null),
    h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    errorsList(chat.errors, "Errors"),
    h("div", { class: "tables" }, rewardsTable(chat.rewards), kvTable(isObject(chat.metrics) ? chat.metrics : null, "Metrics"), timingTable(chat.timing)),
    tools.length ? h("details", {}, h("summary", {}, `Tools advertised (${tools.length})`), jsonTree(tools)) : null,
    h("div", { class: "messages" }, chat.messages.map((m) => messageCard(m, `${scope}-${index}`, callNames, answered, runId))),
    isObject(chat.info) && Object.keys(chat.info).length ? h("details", {}, h("summary", {}, "info"), jsonTree(chat.info)) : null,
    isList(chat.calls) && chat.calls.length ? h("details", {}, h("summary", {}, `Model calls (${chat.calls.length})`), jsonTree(chat.calls)) : null,
    chat.rest && Object.keys(chat.rest).length ? h("details", { class: "rest" }, h("summary", {}, "Other fields"), jsonTree(chat.rest)) : null);
}

function isObject(value) {
  return value && typeof value === "object" && !isList(value);
}

// The facts of the record around its chats: environment, outcome, reward and step (as its
// index row has them, when given: the step it was logged at when it names none), work,
// tokens, group.
export function recordFacts(record, row = null) {
  const traces = isList(record?.traces) ? record.traces : [];
  const total = (name) => record?.[name] ?? traces.reduce((a, t) => a + (t?.[name] || 0), 0);
  const step = record?.run?.work?.step ?? record?.step ?? row?.step ?? null;
  const facts = [
    ["Environment", envName(record?.env)],
    ["Outcome", okBadge(record?.ok)],
    row ? ["Reward", formatNumber(row.reward)] : null,
    ["Step", step ?? "—"],
    ["Work", record?.run?.work?.type || record?.run?.type || "—"],
  ];
  if (traces.length) {
    facts.push(["Tokens", `${formatNumber(total("num_input_tokens"))} in · ${formatNumber(total("num_output_tokens"))} out · ${formatNumber(total("num_total_tokens"))} total`]);
    facts.push(["Traces", formatNumber(traces.length)]);
  }
  if (record?.group?.id) facts.push(["Group", h("code", {}, record.group.id)]);
  if (record?.is_timeout) facts.push(["Timed out", "yes"]);
  return facts.filter(Boolean);
}
