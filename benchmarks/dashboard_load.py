"""
The dashboard under load, measured in Debian's Chromium through Playwright, against a real
`openruns server` process on loopback (embedded store):

1. run page: one run with 50 metrics of 100,000 steps each; from navigation to every chart
   drawn, and the main thread's long tasks (target: interactive in <= 1.5 s);
2. step page: one step of 1,000 production-sized episodes (multi-turn chats with tool calls,
   token ids and logprobs, ~40 KB of JSON each); from navigation to the first page of rows, their
   previews and the reward histogram (target: <= 1 s);
3. episode ingest with and without the search indexer running (the indexer replaced by a task
   that does nothing, in the same server code): MB/s of NDJSON, 8 MiB batches, 2 in flight.

    uv run python benchmarks/dashboard_load.py                 # all three, ~10 minutes
    uv run python benchmarks/dashboard_load.py --part run      # or step, plotly, ingest
    uv run python benchmarks/dashboard_load.py --quick         # a smoke run

Results go in docs/benchmarks.md, section "Dashboard: pages under load".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy
import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_process  # noqa: E402
from chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (benchmarks/chromium.py)
from openruns.rundir import batch_key  # noqa: E402
from search import make_episode as text_episode  # noqa: E402  (benchmarks/search.py)
from search import make_sentences  # noqa: E402
from server_ingest import post_all  # noqa: E402  (benchmarks/server_ingest.py)

SRC = str(Path(__file__).resolve().parents[1] / "src")
MiB = 1024 * 1024

# Replaces the search indexer by a task that waits forever (for the ingest comparison).


def start_server(data_dir: Path, indexer: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    args = ["--data-dir", str(data_dir)]
    return server_process.start_server(args, data_dir.with_suffix(".log"), search_index=indexer)


def new_run(url: str, name: str) -> str:
    response = httpx.post(url + "/api/v1/runs", json={"kind": "train", "name": name}, timeout=30)
    return response.json()["id"]


def compress(lines: list[bytes]) -> tuple[bytes, str]:
    raw = b"".join(lines)
    return zstandard.ZstdCompressor(level=1).compress(raw), batch_key(raw)


# -- production-sized episodes ----------------------------------------------------------------


def production_episode(
    i: int, rng: numpy.random.Generator, sentences: list[str], step: int
) -> dict:
    """A multi-turn chat (benchmarks/search.py) with the per-token fields a trainer logs."""
    episode = text_episode(i, rng, sentences)
    episode["run"]["work"] = {"type": "train", "step": step}
    for node in episode["traces"][0]["nodes"]:
        if node["sampled"]:
            n = max(1, len(node["message"]["content"]) // 4)
            node["token_ids"] = rng.integers(0, 150_000, n).tolist()
            node["logprobs"] = numpy.round(-rng.exponential(0.5, n), 4).tolist()
    return episode


# -- 1. the run page --------------------------------------------------------------------------

# Recorded in the page: when the first and the last of `expected` charts were drawn, when the
# last of the charts in the first screen (the viewport, as laid out once all are drawn) was
# drawn, and every long task (> 50 ms) of the main thread.
RUN_PAGE_PROBE = """
window.__probe = {longTasks: [], firstDrawn: null, allDrawn: null, inView: null, inViewDrawn: null};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__probe.longTasks.push([e.startTime, e.duration]);
}).observe({type: "longtask", buffered: true});
const drawnAt = new Map();
new MutationObserver((records) => {
  const now = performance.now();
  for (const r of records) {
    if (r.target.dataset.drawn === "true" && !drawnAt.has(r.target)) drawnAt.set(r.target, now);
  }
  const p = window.__probe;
  const drawn = document.querySelectorAll('figure.chart[data-drawn="true"]').length;
  if (drawn && p.firstDrawn === null) p.firstDrawn = now;
  if (drawn >= EXPECTED && p.allDrawn === null) {
    p.allDrawn = now;
    const seen = [...drawnAt].filter(([el]) => {
      const box = el.getBoundingClientRect();
      return box.bottom > 0 && box.top < innerHeight;
    });
    p.inView = seen.length;
    p.inViewDrawn = Math.max(0, ...seen.map(([, t]) => t));
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-drawn"]});
"""


def seed_metrics(url: str, keys: int, steps: int) -> str:
    run_id = new_run(url, f"bench-{keys}x{steps}")
    rng = numpy.random.default_rng(0)
    names = [
        f"{['train', 'eval', 'perf', 'opt', 'data'][k % 5]}/metric_{k:02d}" for k in range(keys)
    ]
    bodies = []
    for first in range(0, steps, 5000):
        block = rng.random((min(5000, steps - first), keys))
        lines = [
            orjson.dumps(
                {
                    "step": first + j,
                    "ts": 1.7e9 + first + j,
                    "values": dict(zip(names, row.tolist(), strict=True)),
                }
            )
            + b"\n"
            for j, row in enumerate(block)
        ]
        bodies.append(compress(lines))
    seconds = post_all(url, run_id, "metrics", bodies, workers=2)
    print(f"  seeded {keys} x {steps:,} points in {seconds:.0f} s", flush=True)
    return run_id


def time_page(browser, url: str, path: str, probe: str, ready: str, repeats: int) -> list[dict]:
    """Open `path` `repeats` times (the first cold, then warm: Plotly's bundle cached) and
    read the probe once `ready` (a JS expression) holds."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
    context.add_init_script(probe)
    out = []
    for i in range(repeats):
        page = context.new_page()
        page.goto(path)
        # A function, not an expression: Playwright would eval() an expression, which the
        # pages' Content-Security-Policy (no 'unsafe-eval') refuses.
        page.wait_for_function(f"() => {ready}", timeout=120_000, polling=50)
        page.wait_for_timeout(300)  # long tasks right after the last chart are counted too
        result = page.evaluate("window.__probe")
        result["cold"] = i == 0
        result["load"] = os.getloadavg()[0]
        out.append(result)
        page.close()
    context.close()
    return out


def summarize_run_page(samples: list[dict]) -> dict:
    rows = []
    for s in samples:
        tasks = s["longTasks"]
        blocking = sum(max(0.0, d - 50) for _, d in tasks)
        last_end = max((t + d for t, d in tasks), default=0.0)
        rows.append(
            {
                "cold": s["cold"],
                "load": s["load"],
                "first": s["firstDrawn"],
                "in_view": s["inView"],
                "in_view_drawn": s["inViewDrawn"],
                "all": s["allDrawn"],
                "interactive": max(s["allDrawn"], last_end),
                "tbt": blocking,
                "long_tasks": len(tasks),
                "longest": max((d for _, d in tasks), default=0.0),
            }
        )
    return rows


def bench_run_page(browser, url: str, keys: int, steps: int, repeats: int) -> list[dict]:
    run_id = seed_metrics(url, keys, steps)
    probe = RUN_PAGE_PROBE.replace("EXPECTED", str(keys))
    samples = time_page(
        browser, url, f"/runs/{run_id}", probe, "window.__probe.allDrawn !== null", repeats
    )
    return summarize_run_page(samples)


# -- 2. the step page -------------------------------------------------------------------------

STEP_PAGE_PROBE = """
window.__probe = {longTasks: [], rows: null, previews: null, histogram: null};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__probe.longTasks.push([e.startTime, e.duration]);
}).observe({type: "longtask", buffered: true});
new MutationObserver(() => {
  const p = window.__probe;
  const body = document.querySelector("#episodes tbody");
  if (p.rows === null && body && body.rows.length) p.rows = performance.now();
  const loaded = body && body.dataset.previews === "loaded";
  if (p.previews === null && loaded) p.previews = performance.now();
  const hist = document.querySelector("#histogram");
  if (p.histogram === null && hist && hist.dataset.count) p.histogram = performance.now();
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def seed_step(url: str, episodes: int) -> tuple[str, float]:
    run_id = new_run(url, f"bench-step-{episodes}")
    rng = numpy.random.default_rng(3)
    sentences = make_sentences(rng)
    lines, bodies, size = [], [], 0
    for i in range(episodes):
        line = orjson.dumps(production_episode(i, rng, sentences, step=0)) + b"\n"
        lines.append(line)
        size += len(line)
        if sum(map(len, lines)) >= 8 * MiB:
            bodies.append(compress(lines))
            lines = []
    if lines:
        bodies.append(compress(lines))
    post_all(url, run_id, "episodes", bodies, workers=2)
    return run_id, size / episodes


def bench_step_page(browser, url: str, episodes: int, repeats: int) -> tuple[list[dict], float]:
    run_id, mean_bytes = seed_step(url, episodes)
    print(
        f"  seeded {episodes} episodes at one step, {mean_bytes / 1024:.0f} KB each on average",
        flush=True,
    )
    ready = " && ".join(f"window.__probe.{k} !== null" for k in ("rows", "previews", "histogram"))
    samples = time_page(browser, url, f"/runs/{run_id}/steps/0", STEP_PAGE_PROBE, ready, repeats)
    rows = []
    for s in samples:
        tasks = s["longTasks"]
        done = max(s["rows"], s["previews"], s["histogram"])
        rows.append(
            {
                "cold": s["cold"],
                "load": s["load"],
                "rows": s["rows"],
                "previews": s["previews"],
                "histogram": s["histogram"],
                "interactive": max(done, max((t + d for t, d in tasks), default=0.0)),
                "tbt": sum(max(0.0, d - 50) for _, d in tasks),
            }
        )
    return rows, mean_bytes


# -- 3. ingest with and without the indexer ----------------------------------------------------


def ingest_batches(total_mb: int) -> tuple[list[tuple[bytes, str]], int]:
    rng = numpy.random.default_rng(5)
    sentences = make_sentences(rng)
    template = [production_episode(i, rng, sentences, 0) for i in range(200)]
    batches, total, lines, size, i = [], 0, [], 0, 0
    while total < total_mb * MiB:
        record = dict(template[i % len(template)], id=f"ep-{i:07d}")
        record["run"] = {"type": "train", "work": {"type": "train", "step": i // 256}}
        line = orjson.dumps(record) + b"\n"
        lines.append(line)
        size += len(line)
        total += len(line)
        i += 1
        if size >= 8 * MiB:
            batches.append(compress(lines))
            lines, size = [], 0
    if lines:
        batches.append(compress(lines))
    return batches, total


def index_backlog(data_dir: Path) -> int:
    import sqlite3

    db = sqlite3.connect(data_dir / "openruns.db")
    try:
        top = db.execute("SELECT COALESCE(MAX(seq), 0) FROM episodes").fetchone()[0]
        row = db.execute("SELECT value FROM server_meta WHERE name = 'search_seq'").fetchone()
        return top - int(row[0] if row else 0)
    finally:
        db.close()


def bench_ingest(total_mb: int, rounds: int) -> list[dict]:
    batches, raw = ingest_batches(total_mb)
    out = []
    for r in range(rounds):
        for indexer in (False, True):
            with tempfile.TemporaryDirectory(prefix="openruns-ingest-") as tmp:
                data_dir = Path(tmp) / "data"
                proc, url = start_server(data_dir, indexer=indexer)
                try:
                    seconds = post_all(url, new_run(url, "ingest"), "episodes", batches, workers=2)
                    backlog = index_backlog(data_dir) if indexer else None
                finally:
                    proc.terminate()
                    proc.wait(30)
                out.append(
                    {
                        "round": r,
                        "indexer": indexer,
                        "mb_s": raw / MiB / seconds,
                        "mb": raw / MiB,
                        "not_indexed_at_end": backlog,
                        "load": os.getloadavg()[0],
                    }
                )
                print(f"  round {r} indexer={indexer}: {raw / MiB / seconds:.1f} MB/s", flush=True)
    return out


# -- what Plotly costs alone ------------------------------------------------------------------

PLOTLY_PROBE = """async (url) => {
  const t0 = performance.now();
  await new Promise((res, rej) => {
    const s = document.createElement("script");
    s.src = url;
    s.onload = res;
    s.onerror = () => rej(new Error(`could not load ${url}`));
    document.head.append(s);
  });
  const out = {load: performance.now() - t0};
  for (const n of [1100, 300]) {
    const divs = [];
    for (let i = 0; i < 20; i++) {
      const d = document.createElement("div");
      d.style.width = "600px";
      document.body.append(d);
      divs.push(d);
    }
    const x = Array.from({length: n}, (_, i) => i);
    const y = x.map(Math.random);
    const t = performance.now();
    for (const d of divs) {
      const traces = [{x, y, mode: "lines"}, {x, y, mode: "lines", fill: "tonexty"}, {x, y}];
      await Plotly.react(d, traces, {height: 260, hovermode: "x unified"}, {responsive: true});
    }
    out[`chart_${n}_points`] = (performance.now() - t) / divs.length;
    divs.forEach((d) => d.remove());
  }
  return out;
}"""


def _answer_with(body: bytes):
    return lambda route: route.fulfill(content_type="text/javascript", body=body)


def bench_plotly(browser, url: str, repeats: int, other: Path | None = None) -> list[dict]:
    """Plotly's bundle loaded into an empty page (from the HTTP cache after the first time),
    then the ms per chart of 20 charts drawn as the dashboard draws them. With `other` (another
    bundle, e.g. the full plotly.min.js), that one is measured too, alternating with ours, both
    then answered by the browser itself (no HTTP cache) so that they are measured alike."""
    from openruns.server.web.assets import PLOTLY_URL, plotly_bundle

    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
    # An empty page of the server's origin (the bundle's URL is same-origin, so the HTTP cache
    # serves it after the first time), answered by the browser itself: the server's own
    # answers that are not pages forbid scripts (Content-Security-Policy default-src 'none').
    blank = "/__plotly_probe"
    context.route(
        f"**{blank}", lambda route: route.fulfill(content_type="text/html", body="<!doctype html>")
    )
    bundles = {"served": PLOTLY_URL}
    if other is not None:
        bodies = {"/__bundle/ours.js": plotly_bundle(), "/__bundle/other.js": other.read_bytes()}
        for path, body in bodies.items():
            context.route(f"**{path}", _answer_with(body))
        bundles = {"ours": "/__bundle/ours.js", f"other ({other.name})": "/__bundle/other.js"}
    out = []
    for _ in range(repeats):
        for name, src in bundles.items():
            page = context.new_page()
            page.goto(blank)
            row = page.evaluate(PLOTLY_PROBE, src)
            out.append({"bundle": name, **row, "loadavg": os.getloadavg()[0]})
            page.close()
    context.close()
    return out


# -- main -------------------------------------------------------------------------------------


def table(rows: list[dict], columns: list[str]) -> str:
    def cell(v, column):
        if not isinstance(v, float):
            return str(v)
        return f"{v:.1f}" if column == "load" else f"{v:.0f}"

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c], c) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("run", "step", "plotly", "ingest", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--repeats", type=int, default=4, help="page loads (the first cold)")
    parser.add_argument(
        "--rounds", type=int, default=4, help="ingest rounds, each with and without"
    )
    parser.add_argument(
        "--compare-bundle",
        type=Path,
        help="--part plotly: measure this Plotly bundle too (e.g. the full plotly.min.js)",
    )
    args = parser.parse_args()
    keys, steps = (10, 5_000) if args.quick else (50, 100_000)
    episodes = 100 if args.quick else 1_000
    ingest_mb = 64 if args.quick else 512
    print(f"load average at start: {os.getloadavg()}", flush=True)

    if args.part in ("run", "step", "plotly", "all"):
        from playwright.sync_api import sync_playwright

        with tempfile.TemporaryDirectory(prefix="openruns-dash-") as tmp:
            proc, url = start_server(Path(tmp) / "data")
            try:
                with sync_playwright() as pw:
                    browser = pw.chromium.launch(
                        executable_path=CHROMIUM,
                        args=CHROMIUM_ARGS,
                    )
                    if args.part in ("run", "all"):
                        print(f"run page: {keys} metrics x {steps:,} steps", flush=True)
                        rows = bench_run_page(browser, url, keys, steps, args.repeats)
                        print(
                            table(
                                rows,
                                [
                                    "cold",
                                    "load",
                                    "first",
                                    "in_view",
                                    "in_view_drawn",
                                    "all",
                                    "interactive",
                                    "tbt",
                                    "long_tasks",
                                    "longest",
                                ],
                            )
                        )
                        warm = [r["interactive"] for r in rows if not r["cold"]]
                        median = statistics.median(warm)
                        print(f"  warm interactive median {median:.0f} ms; {os.getloadavg()}")
                    if args.part in ("step", "all"):
                        print(f"step page: {episodes} episodes", flush=True)
                        rows, _ = bench_step_page(browser, url, episodes, args.repeats)
                        print(
                            table(
                                rows,
                                [
                                    "cold",
                                    "load",
                                    "rows",
                                    "previews",
                                    "histogram",
                                    "interactive",
                                    "tbt",
                                ],
                            )
                        )
                        warm = [r["interactive"] for r in rows if not r["cold"]]
                        median = statistics.median(warm)
                        print(f"  warm interactive median {median:.0f} ms; {os.getloadavg()}")
                    if args.part in ("plotly", "all"):
                        other = args.compare_bundle
                        for row in bench_plotly(browser, url, args.repeats, other):
                            name, loadavg = row.pop("bundle"), row.pop("loadavg")
                            times = ", ".join(f"{k} {v:.0f} ms" for k, v in row.items())
                            print(f"  plotly {name}: {times} (load average {loadavg:.1f})")
                    browser.close()
            finally:
                proc.terminate()
                proc.wait(30)
    if args.part in ("ingest", "all"):
        print(f"episode ingest, {ingest_mb} MB, with and without the search indexer", flush=True)
        rows = bench_ingest(ingest_mb, rounds=1 if args.quick else args.rounds)
        for indexer in (False, True):
            rates = [r["mb_s"] for r in rows if r["indexer"] is indexer]
            print(f"  indexer={indexer}: median {statistics.median(rates):.1f} MB/s of {rates}")
        print(table(rows, ["round", "indexer", "mb_s", "mb", "not_indexed_at_end", "load"]))
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
