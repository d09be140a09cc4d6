// Two records side by side (?run_a=R&a=ID&run_b=R&b=ID): the same step of one run, or two
// runs. Each side is drawn as the episode page draws it (chat.js), with its run, step and
// facts above, so the two read row against row.

import { api, fill, h, runLabel, showError } from "./common.js";
import { loadRecord, recordFacts, renderChat } from "./chat.js";
import { jsonTree } from "./render.js";

const params = new URLSearchParams(location.search);

async function side(root, runId, id, scope) {
  if (!runId || !id) {
    fill(root, h("p", { class: "muted" }, "Nothing chosen for this side."));
    return;
  }
  const base = `/runs/${encodeURIComponent(runId)}`;
  const [run, { record, row, kind, chats }] = await Promise.all([api(base), loadRecord(base, id)]);
  const step = record.run?.work?.step ?? record.step ?? row?.step ?? null;
  fill(root,
    h("p", { class: "crumbs" }, h("a", { href: base }, runLabel(run)), " › ",
      step !== null ? h("a", { href: `${base}/steps/${step}` }, `step ${step}`) : "no step", " › ",
      h("a", { href: `${base}/episodes/${encodeURIComponent(id)}` }, h("code", {}, id))),
    h("dl", { class: "facts narrow" }, recordFacts(record, row).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    kind === "other"
      ? jsonTree(record)
      : chats.map((chat, i) => renderChat(chat, { scope, heading: kind === "chat" ? "Chat" : "Trace", count: chats.length, index: i, runId })),
  );
}

async function main() {
  await Promise.all([
    side(document.getElementById("side-a"), params.get("run_a"), params.get("a"), "a"),
    side(document.getElementById("side-b"), params.get("run_b"), params.get("b"), "b"),
  ]);
}

main().catch(showError);
