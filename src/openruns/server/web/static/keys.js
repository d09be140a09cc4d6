// A run's metric keys as the pages read them (issue 21: a run of 100,000 keys). One request
// gives the ALL_KEYS most recently logged keys (`order=recent`): a run with no more is read
// whole, as before; a run with more is charted in part: its CHARTED most recent keys, the
// others found with KeySearch and charted on demand, or CHARTED more at a time.

import { api, formatNumber, h, showError } from "./common.js";

export const ALL_KEYS = 500; // the server's default page; a run past it has "many keys"
export const CHARTED = 40; // charts of a many-keys run before the reader asks for more
const MATCHES = 30; // matches listed for a search

const keysPath = (runId) => `/runs/${encodeURIComponent(runId)}/metrics/keys`;

// {items, next_cursor, total}: the entries of the ALL_KEYS keys logged at the latest steps.
export function recentKeys(runId, limit = ALL_KEYS) {
  return api(keysPath(runId), { order: "recent", limit });
}

// The entries of the first `n` distinct keys of `rows` (a key logged both ways has two).
export function firstKeys(rows, n) {
  const keys = new Set();
  const out = [];
  for (const row of rows) {
    if (!keys.has(row.key)) {
      if (keys.size === n) break;
      keys.add(row.key);
    }
    out.push(row);
  }
  return out;
}

// The keys of a many-keys run that a page charts: the rows of every charted key, more of them
// from the recent order on demand, and the search box that charts any other.
export class ChartedKeys {
  // root: the element holding #keys-note, #key-search, #key-matches and #keys-more.
  constructor(root, runId, onChange) {
    this.root = root;
    this.runId = runId;
    this.onChange = onChange; // called with no arguments when keys were added
    this.on = false;
    this.rows = new Map(); // "key\0axis" -> the entry, for every charted key
    this.pool = []; // entries read in the recent order and not charted yet
    this.cursor = null; // where the recent order goes on after `pool`
    this.total = 0;
    this.searchView = 0;
  }

  get keys() {
    return new Set([...this.rows.values()].map((row) => row.key));
  }

  // The page of recent keys just read: the first time a run has more than ALL_KEYS, chart its
  // CHARTED most recent; on later polls, refresh the entries of the charted keys.
  update(page) {
    this.total = page.total;
    if (!this.on) {
      if (!page.next_cursor) return false;
      this.on = true;
      const first = firstKeys(page.items, CHARTED);
      this.add(first);
      this.pool = page.items.slice(first.length);
      this.cursor = page.next_cursor;
      this.setUp();
    }
    const charted = this.keys;
    for (const row of page.items) if (charted.has(row.key)) this.rows.set(`${row.key}\0${row.axis}`, row);
    this.note();
    return true;
  }

  add(rows) {
    for (const row of rows) this.rows.set(`${row.key}\0${row.axis}`, row);
  }

  note() {
    this.root.querySelector("#keys-note").textContent =
      `This run has ${formatNumber(this.total)} metric keys: ${formatNumber(this.keys.size)} charted, ` +
      "the most recently logged first. Find any other below.";
    this.root.querySelector("#keys-more").hidden = !this.pool.length && !this.cursor;
  }

  // CHARTED more keys of the recent order.
  async more() {
    if (this.pool.length < CHARTED && this.cursor) {
      const page = await api(keysPath(this.runId), { order: "recent", limit: ALL_KEYS, cursor: this.cursor });
      const charted = this.keys;
      this.pool.push(...page.items.filter((row) => !charted.has(row.key)));
      this.cursor = page.next_cursor;
    }
    const next = firstKeys(this.pool, CHARTED);
    this.pool = this.pool.slice(next.length);
    this.add(next);
    this.note();
    this.onChange();
  }

  async search(text) {
    const view = ++this.searchView;
    const list = this.root.querySelector("#key-matches");
    if (!text) {
      list.replaceChildren();
      return;
    }
    const page = await api(keysPath(this.runId), { q: text, limit: MATCHES });
    if (view !== this.searchView) return; // a newer search is under way
    const charted = this.keys;
    const byKey = new Map();
    for (const row of page.items) byKey.set(row.key, [...(byKey.get(row.key) || []), row]);
    const items = [...byKey].map(([key, rows]) => h("li", {},
      h("button", {
        type: "button", class: "link", disabled: charted.has(key), dataset: { key },
        onclick: (event) => {
          event.target.disabled = true;
          this.add(rows);
          this.note();
          this.onChange();
        },
      }, key)));
    const more = page.total - byKey.size;
    list.replaceChildren(...items, more > 0 ? h("li", { class: "muted" }, `${formatNumber(more)} more: type more of the name`) : null,
      items.length ? null : h("li", { class: "muted" }, "No key matches."));
  }

  setUp() {
    this.root.hidden = false;
    const input = this.root.querySelector("#key-search");
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.search(input.value.trim()).catch(showError), 200);
    });
    this.root.querySelector("#keys-more").addEventListener("click", () => this.more().catch(showError));
  }
}
