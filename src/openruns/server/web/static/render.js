// Building blocks of the pages that show records: folded long text, a collapsible JSON tree,
// small key/value tables. Text from records is always set as text, never parsed as HTML.

import { formatNumber, h } from "./common.js";

const FOLD_CHARS = 1500;
const FOLD_LINES = 24;
const TREE_CHILDREN = 200; // children of a tree node shown before a "show more" button
const TREE_OPEN_DEPTH = 1;

export function json(value) {
  return JSON.stringify(value, null, 2);
}

// A block of text, folded when long: the first FOLD_LINES lines / FOLD_CHARS characters and a
// button naming what is hidden. Nothing is cut without saying so.
export function foldText(text, className = "text") {
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

function scalar(value) {
  if (value === null) return h("span", { class: "tree-null" }, "null");
  if (typeof value === "string") return h("span", { class: "tree-string" }, JSON.stringify(value));
  if (typeof value === "number") return h("span", { class: "tree-number" }, String(value));
  if (typeof value === "boolean") return h("span", { class: "tree-bool" }, String(value));
  return h("span", {}, String(value));
}

function summary(value) {
  if (Array.isArray(value)) return `[${value.length} item${value.length === 1 ? "" : "s"}]`;
  const n = Object.keys(value).length;
  return `{${n} key${n === 1 ? "" : "s"}}`;
}

// A collapsible tree of any JSON value. Children are built when a node is first opened, so a
// record of many MB costs nothing until it is explored; long strings fold.
export function jsonTree(value, depth = 0) {
  if (value === null || typeof value !== "object") {
    return typeof value === "string" && value.length > 200 ? foldText(value, "json") : scalar(value);
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const node = h("details", { class: "tree", open: depth < TREE_OPEN_DEPTH && entries.length <= TREE_CHILDREN },
    h("summary", {}, h("span", { class: "muted" }, summary(value))));
  const list = h("ul", { class: "tree-children" });
  let shown = 0;
  const showMore = () => {
    const next = entries.slice(shown, shown + TREE_CHILDREN);
    list.querySelector(":scope > li.tree-more")?.remove();
    for (const [key, child] of next) {
      list.append(h("li", {}, h("span", { class: "tree-key" }, String(key)), ": ", jsonTree(child, depth + 1)));
    }
    shown += next.length;
    if (shown < entries.length) {
      const button = h("button", { type: "button", class: "fold" }, `Show ${formatNumber(Math.min(TREE_CHILDREN, entries.length - shown))} more of ${formatNumber(entries.length - shown)}`);
      button.addEventListener("click", showMore);
      list.append(h("li", { class: "tree-more" }, button));
    }
  };
  const build = () => {
    if (shown || !entries.length) return;
    node.append(list);
    showMore();
  };
  if (node.open) build();
  node.addEventListener("toggle", () => node.open && build());
  return node;
}

// A mapping as a small table; nested values as trees.
export function kvTable(mapping, caption) {
  const rows = Object.entries(mapping || {}).map(([k, v]) => h("tr", {},
    h("th", { scope: "row" }, k),
    h("td", { class: typeof v === "number" ? "num" : "" },
      typeof v === "number" ? formatNumber(v) : v && typeof v === "object" ? jsonTree(v) : String(v))));
  if (!rows.length) return null;
  return h("table", { class: "grid kv" }, caption ? h("caption", {}, caption) : null, h("tbody", {}, rows));
}
