"""
The dashboard's chart grid at fleet scale (issue 21, the dashboard rows), in Debian's Chromium
1280x900 through Playwright, against a real `openruns server` process on loopback (SQLite and
a data directory). The dashboard's code is the server's (it serves its own pages and scripts),
so `--src` measures another checkout's, e.g. main's Plotly grid before uPlot:

    git archive d03e3eb src | tar -x -C /tmp/before-base    # the Plotly grid (main before it)
    uv run python benchmarks/chart_grid.py --data-dir /tmp/grid-data --src /tmp/before-base/src
    uv run python benchmarks/chart_grid.py --data-dir /tmp/grid-data   # this tree's

Pages, each opened `--repeats` times in one browser context (the first cold: the browser's
cache empty and, unless `--warm-server`, the server's first reads since it started;
`--warm-server` loads the page once first in a context thrown away, so the first load is a
first visit to a server that has been serving):

1. run50: the run page of 50 metrics x 100,000 steps: the first screen (every chart in the
   first viewport drawn) and all 50 drawn;
2. run200: the run page of 200 metrics x 100,000 steps: all 200 drawn. The page is scrolled
   down a viewport at a time once the charts in view are drawn (a grid of more than 60 charts
   draws the charts near the viewport only), so "all drawn" includes scrolling to the end;
3. compare: 20 runs overlaid on 20 charts (20 metrics x `--compare-steps` steps each run);
4. keys: the run page of a run of 100,000 metric keys (5 steps each; the seeding of
   benchmarks/metric_keys.py): the keys note and search box shown, 40 charts drawn, JS heap;
5. draw (this tree's server only, not part of "all"): uPlot alone in an empty page, ms per
   chart of 20 charts, beside Plotly's (dashboard_load.py's probe), in the same browser.

"Drawn" is a chart's `data-drawn` attribute (charts.js sets it right after the chart library's
draw call returns), seen by a MutationObserver in the page; times are `performance.now()` from
navigation start. Long tasks (> 50 ms) of the main thread come from a PerformanceObserver;
"blocking" is their sum past 50 ms each. The seeded runs stay in `--data-dir` (reused when it
holds them: their ids in DIR.seeded.json beside it), so both codes read the same data; that
directory is not part of the tree. Results go in docs/benchmarks.md, "The chart grid on uPlot
(issue 21)".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (benchmarks/chromium.py)
from dashboard_load import bench_plotly, compress, new_run  # noqa: E402  (dashboard_load.py)
from metric_keys import SRC, seed_keys, start_server  # noqa: E402

# Cheap on every mutation (a count kept as charts are drawn); the first screen (the charts in
# the viewport at the top of the page, all drawn) is judged once, after drawing, from the time
# each chart was drawn.
PROBE = """
window.__probe = {longTasks: [], allDrawn: null, note: null, reads: []};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__probe.longTasks.push([e.startTime, e.duration]);
}).observe({type: "longtask", buffered: true});
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    if (e.name.includes("/metrics?")) window.__probe.reads.push([e.startTime, e.duration]);
  }
}).observe({type: "resource", buffered: true});
window.__drawnAt = new Map();
new MutationObserver((records) => {
  const p = window.__probe;
  const now = performance.now();
  for (const r of records) {
    const el = r.target;
    if (el.dataset.drawn === "true" && !el.classList.contains("bands") && !__drawnAt.has(el)) {
      __drawnAt.set(el, now);
    }
  }
  if (p.allDrawn === null && __drawnAt.size >= EXPECTED) p.allDrawn = now;
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-drawn"]});
new MutationObserver(() => {
  const p = window.__probe;
  const note = document.getElementById("keys-note");
  if (p.note === null && note && note.textContent) p.note = performance.now();
}).observe(document, {subtree: true, childList: true, characterData: true});
"""

# When the charts in the viewport (at the top of the page) are all drawn, or null.
FIRST_SCREEN = """() => {
  if (scrollY !== 0) return null;
  const charts = [...document.querySelectorAll("figure.chart:not(.bands)")];
  const inView = charts.filter((c) => {
    const box = c.getBoundingClientRect();
    return box.height && box.bottom > 0 && box.top < innerHeight;
  });
  if (!inView.length || !inView.every((c) => __drawnAt.has(c))) return null;
  return [Math.max(...inView.map((c) => __drawnAt.get(c))), inView.length];
}"""

# Scrolls a viewport down whenever the charts in view are drawn, until `expected` are drawn.
SCROLL_THROUGH = """async (expected) => {
  const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));
  for (;;) {
    const charts = [...document.querySelectorAll("figure.chart:not(.bands)")];
    if (charts.filter((c) => c.dataset.drawn === "true").length >= expected) return;
    const waiting = charts.some((c) => {
      const box = c.getBoundingClientRect();
      return box.bottom > 0 && box.top < innerHeight && c.dataset.drawn !== "true";
    });
    if (!waiting) scrollBy(0, innerHeight);
    await frame();
  }
}"""


# uPlot alone in an empty page: the build loaded (HTTP cache after the first time), then the ms
# per chart of 20 charts drawn as charts.js draws a bucketed one (a line between its min/max
# band, 600 px wide), as dashboard_load.py's PLOTLY_PROBE does for Plotly.
UPLOT_PROBE = """async (url) => {
  const t0 = performance.now();
  await new Promise((res, rej) => {
    const s = document.createElement("script");
    s.src = url;
    s.onload = res;
    s.onerror = () => rej(new Error(`could not load ${url}`));
    document.head.append(s);
  });
  const out = {bundle_ms: performance.now() - t0};
  for (const n of [1100, 300]) {
    const x = Array.from({length: n}, (_, i) => i);
    const y = x.map(Math.random);
    const lo = y.map((v) => v - 0.1);
    const hi = y.map((v) => v + 0.1);
    const charts = [];
    const t = performance.now();
    for (let i = 0; i < 20; i++) {
      const d = document.createElement("div");
      document.body.append(d);
      charts.push(new uPlot({
        width: 600, height: 200, title: "m",
        series: [{}, {stroke: "#aaa"}, {stroke: "#aaa"}, {stroke: "#1f77b4", width: 1.6}],
        bands: [{series: [1, 2], fill: "rgba(31,119,180,0.2)"}],
      }, [x, hi, lo, y], d));
      await null; // uPlot draws in a microtask queued by its constructor
    }
    out[`chart_${n}_points`] = (performance.now() - t) / charts.length;
    charts.forEach((c) => { c.destroy(); });
  }
  return out;
}"""


def bench_draw(browser, url: str, repeats: int) -> list[dict]:
    """uPlot's per-chart cost beside Plotly's (dashboard_load.bench_plotly), the same browser."""
    from openruns.server.web.assets import UPLOT_JS_URL

    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
    blank = "/__uplot_probe"
    context.route(
        f"**{blank}", lambda route: route.fulfill(content_type="text/html", body="<!doctype html>")
    )
    out = []
    for _ in range(repeats):
        page = context.new_page()
        page.goto(blank)
        out.append({"library": "uPlot", **page.evaluate(UPLOT_PROBE, UPLOT_JS_URL)})
        page.close()
    context.close()
    for row in bench_plotly(browser, url, repeats):
        row.pop("loadavg")
        row.pop("bundle")
        out.append({"library": "Plotly", "bundle_ms": row.pop("load"), **row})
    for row in out:
        row["loadavg"] = os.getloadavg()[0]
    return out


def seed_wide(url: str, keys: int, steps: int) -> str:
    """A run of `keys` metrics x `steps` steps (dashboard_load.py's names and values), posted
    ~400,000 points a request, two at a time, each again after a 503 (the single SQLite writer
    busy past 10 s with a wide write on a loaded machine)."""
    run_id = new_run(url, f"bench-{keys}x{steps}")
    names = [
        f"{['train', 'eval', 'perf', 'opt', 'data'][k % 5]}/metric_{k:02d}" for k in range(keys)
    ]
    rows = max(1, min(5000, 400_000 // keys))
    started = time.monotonic()

    def post(first: int) -> None:
        block = numpy.random.default_rng(first).random((min(rows, steps - first), keys))
        lines = [
            orjson.dumps(
                {
                    "step": first + j,
                    "ts": 1.7e9 + first + j,
                    "values": dict(zip(names, row, strict=True)),
                }
            )
            + b"\n"
            for j, row in enumerate(block.tolist())
        ]
        body, key = compress(lines)
        headers = {"Content-Encoding": "zstd", "Idempotency-Key": key}
        for _ in range(30):
            answer = http.post(f"/runs/{run_id}/metrics", content=body, headers=headers)
            if answer.status_code != 503:
                break
            time.sleep(2)
        answer.raise_for_status()

    with httpx.Client(base_url=url + "/api/v1", timeout=300) as http, ThreadPoolExecutor(2) as pool:
        list(pool.map(post, range(0, steps, rows)))
    print(f"  seeded {keys} x {steps:,} points in {time.monotonic() - started:.0f} s", flush=True)
    return run_id


PARTS = ("run50", "run200", "compare", "keys")


def seed(url: str, args: argparse.Namespace, marker: Path) -> dict:
    """The runs every page reads, {"run50": id, "run200": id, "compare": [ids], "keys": id},
    each finished, kept in `marker` part by part (a part seeded before is not seeded again)."""
    seeded: dict = json.loads(marker.read_text()) if marker.exists() else {}
    with httpx.Client(base_url=url + "/api/v1", timeout=600) as http:
        parts = {
            "run50": lambda: seed_wide(url, 50, args.steps),
            "run200": lambda: seed_wide(url, 200, args.steps),
            "compare": lambda: [seed_wide(url, 20, args.compare_steps) for _ in range(20)],
            "keys": lambda: seed_keys(http, args.keys, 5),
        }
        for name in PARTS:
            if name in seeded:
                continue
            seeded[name] = parts[name]()
            for run_id in seeded[name] if name == "compare" else [seeded[name]]:
                http.post(f"/runs/{run_id}/finish", json={"status": "completed"}).raise_for_status()
            marker.write_text(json.dumps(seeded))
    return seeded


def measure(browser, url: str, path: str, expected: int, scroll: bool, repeats: int) -> list:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
    context.add_init_script(PROBE.replace("EXPECTED", str(expected)))
    out = []
    for i in range(repeats):
        load_start = os.getloadavg()[0]
        page = context.new_page()
        page.goto(path)
        # A function, not an expression: the pages' CSP refuses eval().
        first = page.wait_for_function(FIRST_SCREEN, timeout=300_000, polling=50).json_value()
        if scroll:
            page.evaluate(SCROLL_THROUGH, expected)
        page.wait_for_function("() => window.__probe.allDrawn !== null", timeout=300_000)
        page.wait_for_timeout(300)  # long tasks right after the last chart are counted too
        p = page.evaluate("window.__probe")
        heap = page.evaluate("performance.memory.usedJSHeapSize") / 2**20
        tasks, reads = p["longTasks"], p["reads"]
        out.append(
            {
                "cold": i == 0,
                "load": f"{load_start:.1f}-{os.getloadavg()[0]:.1f}",
                "note": p["note"],
                "first_screen": first[0],
                "in_view": first[1],
                "all_drawn": p["allDrawn"],
                "long_tasks": len(tasks),
                "blocking": sum(max(0.0, d - 50) for _, d in tasks),
                "longest": max((d for _, d in tasks), default=0.0),
                "reads": len(reads),
                "read_median": statistics.median(d for _, d in reads) if reads else 0.0,
                "heap_mb": heap,
            }
        )
        page.close()
    context.close()
    return out


def table(rows: list[dict]) -> str:
    columns = list(rows[0])

    def cell(v: object) -> str:
        if v is None:
            return "—"
        return (
            f"{v:.1f}"
            if isinstance(v, float) and v < 100
            else (f"{v:,.0f}" if isinstance(v, float) else str(v))
        )

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="seeded once, then reused")
    parser.add_argument("--src", default=SRC, help="the server (and dashboard) code to run")
    parser.add_argument(
        "--part", choices=("run50", "run200", "compare", "keys", "draw", "all"), default="all"
    )
    parser.add_argument("--repeats", type=int, default=3, help="page loads (the first cold)")
    parser.add_argument("--steps", type=int, default=100_000, help="steps of run50 and run200")
    parser.add_argument("--compare-steps", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=100_000, help="keys of the many-keys run")
    parser.add_argument("--seed-only", action="store_true")
    parser.add_argument(
        "--warm-server", action="store_true", help="one load first, in a context thrown away"
    )
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}; code: {args.src}", flush=True)
    marker = args.data_dir.with_suffix(".seeded.json")
    if set(PARTS) - set(json.loads(marker.read_text()) if marker.exists() else {}):
        proc, url = start_server(["--data-dir", str(args.data_dir)], SRC)
        try:
            seed(url, args, marker)
        finally:
            proc.terminate()
            proc.wait(30)
        print(f"seeded; load average {os.getloadavg()}", flush=True)
    if args.seed_only:
        return
    seeded = json.loads(marker.read_text())
    pages = {
        "run50": (f"/runs/{seeded['run50']}", 50, False),
        "run200": (f"/runs/{seeded['run200']}", 200, True),
        "compare": ("/compare?runs=" + ",".join(seeded["compare"]), 20, False),
        "keys": (f"/runs/{seeded['keys']}", 40, False),
    }
    from playwright.sync_api import sync_playwright

    proc, url = start_server(["--data-dir", str(args.data_dir)], args.src)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
            )
            if args.part == "draw":
                print("draw: ms per chart, uPlot and Plotly alone", flush=True)
                print(table(bench_draw(browser, url, args.repeats)), flush=True)
            for name, (path, expected, scroll) in pages.items():
                if args.part not in (name, "all"):
                    continue
                print(f"{name}: {path[:60]} ({expected} charts)", flush=True)
                if args.warm_server:
                    measure(browser, url, path, expected, scroll, 1)
                print(
                    table(measure(browser, url, path, expected, scroll, args.repeats)), flush=True
                )
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
