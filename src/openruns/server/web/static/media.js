// The run page's Media section: what a run logged besides metrics and episodes, as the W&B
// SDK logs it (server/wandb/media.py): images and tables, one card per key, each at a step the
// reader picks (the latest by default). A table is drawn as a table, its image cells as
// images; a table whose rows became episodes says so and links to their step. Hidden while
// the run has none.
//
//   GET /api/v1/runs/{id}/media          {items: [{key, step, type, paths, captions, width,
//                                         height, nrows, ncols, episodes}]}
//   GET /api/v1/runs/{id}/media/{path}   a file (an image, a table's JSON)

import { api, formatNumber, h } from "./common.js";
import { mediaSrc } from "./chat.js";
import { foldText, jsonTree } from "./render.js";

const TABLE_ROWS = 50; // rows of a table drawn before a "show more" button
const CELL_CHARS = 400; // a longer text cell folds
const TABLE_TYPES = new Set(["table-file", "incremental-table-file", "table"]);

export class MediaSection {
  constructor(root, runId) {
    this.root = root;
    this.runId = runId;
    this.base = `/runs/${encodeURIComponent(runId)}`;
    this.signature = null;
    this.cards = new Map(); // key -> {items, step, body, select}
    this.list = h("div", { class: "media-cards" });
    root.append(this.list);
  }

  // Read the listing again and redraw the cards whose items changed; false when the server
  // has no media route (nothing to poll).
  async poll() {
    let listing;
    try {
      listing = await api(`${this.base}/media`);
    } catch (error) {
      if (error.status === 404 || error.status === 405) return false;
      throw error;
    }
    const items = listing?.items || [];
    const signature = JSON.stringify(items);
    if (signature === this.signature) return true;
    this.signature = signature;
    const byKey = new Map();
    for (const item of items) {
      if (!byKey.has(item.key)) byKey.set(item.key, []);
      byKey.get(item.key).push(item);
    }
    for (const [key, keyItems] of [...byKey].sort(([a], [b]) => a.localeCompare(b))) {
      keyItems.sort((a, b) => (a.step ?? -1) - (b.step ?? -1));
      this.card(key, keyItems);
    }
    this.root.hidden = byKey.size === 0;
    document.getElementById("toc-media")?.toggleAttribute("hidden", byKey.size === 0);
    return true;
  }

  card(key, items) {
    let card = this.cards.get(key);
    const follow = !card || card.step === card.items.at(-1)?.step; // on the latest: stay on it
    if (!card) {
      const select = h("select", { "aria-label": `Step of ${key}` });
      const body = h("div", { class: "media-body" });
      const kind = TABLE_TYPES.has(items[0].type) ? "table" : "images";
      this.list.append(h("section", { class: "media-card", dataset: { key, kind } },
        h("header", {}, h("h3", {}, key), h("span", { class: "badge" }, kind),
          h("label", {}, " step ", select)),
        body));
      card = { items, step: null, body, select };
      select.addEventListener("change", () => this.show(card, Number(select.value)));
      this.cards.set(key, card);
    }
    card.items = items;
    card.select.replaceChildren(...items.map((item, i) => h("option", { value: String(i) }, item.step ?? "—")));
    const index = follow ? items.length - 1 : Math.max(0, items.findIndex((item) => item.step === card.step));
    this.show(card, index);
  }

  show(card, index) {
    const item = card.items[index];
    card.step = item.step;
    card.select.value = String(index);
    if (TABLE_TYPES.has(item.type)) {
      this.table(card.body, item).catch((error) => card.body.replaceChildren(h("p", { class: "muted" }, `Not readable: ${error.message}`)));
    } else {
      card.body.replaceChildren(h("div", { class: "media-images" }, item.paths.map((path, i) => figure(path, item.captions?.[i], this.runId))));
    }
  }

  async table(body, item) {
    const table = await api(`${this.base}/media/${item.paths[0].split("/").map(encodeURIComponent).join("/")}`);
    const columns = Array.isArray(table?.columns) ? table.columns : [];
    const rows = Array.isArray(table?.data) ? table.data : [];
    const note = item.episodes
      ? h("p", { class: "media-note" }, `${formatNumber(item.episodes)} episodes were read from this table: `,
        item.step !== null && item.step !== undefined
          ? h("a", { href: `${this.base}/steps/${item.step}` }, `the episodes of step ${item.step}`)
          : h("a", { href: `${this.base}#steps` }, "the steps with episodes"))
      : null;
    const tbody = h("tbody");
    const grid = h("table", { class: "grid wb-table" },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, String(c))))), tbody);
    let shown = 0;
    const more = h("button", { type: "button", class: "fold" });
    const showMore = () => {
      for (const row of rows.slice(shown, shown + TABLE_ROWS)) {
        tbody.append(h("tr", {}, (Array.isArray(row) ? row : [row]).map((cell) => this.cell(cell))));
      }
      shown = Math.min(rows.length, shown + TABLE_ROWS);
      more.hidden = shown >= rows.length;
      more.textContent = `Show ${formatNumber(Math.min(TABLE_ROWS, rows.length - shown))} more of ${formatNumber(rows.length - shown)} rows`;
    };
    more.addEventListener("click", showMore);
    showMore();
    body.replaceChildren(...[note, h("p", { class: "muted" }, `${formatNumber(rows.length)} rows, ${formatNumber(columns.length)} columns`),
      h("div", { class: "table-scroll" }, grid), more].filter(Boolean));
  }

  cell(value) {
    if (value === null || value === undefined) return h("td", { class: "muted" }, "");
    if (typeof value === "number") return h("td", { class: "num" }, formatNumber(value));
    if (typeof value === "string") return h("td", {}, value.length > CELL_CHARS ? foldText(value) : value);
    if (Array.isArray(value) && !value.length) return h("td", { class: "muted" }, ""); // no images
    const images = imageRefs(value);
    if (images.length) return h("td", {}, h("div", { class: "media-images" }, images.map((ref) => figure(ref.path, ref.caption, this.runId))));
    return h("td", {}, jsonTree(value));
  }
}

// W&B image references in a table cell: one, or a list (TRL's image column).
function imageRefs(value) {
  const list = Array.isArray(value) ? value : [value];
  return list.filter((v) => v && typeof v === "object" && v._type === "image-file" && typeof v.path === "string");
}

function figure(path, caption, runId) {
  const src = mediaSrc(path, runId);
  return h("figure", { class: "part image" },
    src ? h("img", { src, alt: caption || path.split("/").at(-1), loading: "lazy" }) : h("code", {}, path),
    caption ? h("figcaption", {}, caption) : null);
}
