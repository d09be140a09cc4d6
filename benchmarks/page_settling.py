"""
How the dashboard's pages settle, over the runs `benchmarks/chart_grid.py` seeds (issue 21):

1. shifts: how far what is shown moves as a page fills in, as Chromium's Layout Instability
   API counts it (`layout-shift` entries without input, buffered, over `--settle-ms` after
   the page loads): the cumulative layout shift (Google: at most 0.1 is good, above 0.25
   poor) and the elements of each shift, from where to where;
2. trace: where the renderer's main thread spends one warm load of a page (a Chrome trace of
   `devtools.timeline` and its detailed events), by event, each event's own time (its
   children's taken out): the run page of 200 charts scrolled through as chart_grid.py does
   it, or another page.

    uv run python benchmarks/chart_grid.py --data-dir /tmp/grid-data --seed-only
    uv run python benchmarks/page_settling.py --data-dir /tmp/grid-data --part shifts
    uv run python benchmarks/page_settling.py --data-dir /tmp/grid-data --part trace --page run200

`--src DIR` serves another checkout's server and dashboard (e.g. `git archive REV src`).
Results go in docs/benchmarks.md, "Layout shifts as pages fill in".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_grid import FIRST_SCREEN, PROBE, SCROLL_THROUGH  # noqa: E402
from chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from metric_keys import SRC, start_server  # noqa: E402

SHIFTS = """
window.__shifts = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    if (e.hadRecentInput) continue;
    const moved = (e.sources || []).map((s) => {
      const node = s.node;
      const name = node ? node.nodeName + (node.id ? "#" + node.id : "") : "?";
      return `${name} ${Math.round(s.previousRect.y)}->${Math.round(s.currentRect.y)}`;
    });
    window.__shifts.push([Math.round(e.startTime), e.value, moved]);
  }
}).observe({type: "layout-shift", buffered: true});
"""


def pages(data_dir: Path) -> dict[str, tuple[str, int, bool]]:
    """Path, charts expected and whether the harness scrolls, of each page of the seeded runs."""
    seeded = json.loads(data_dir.with_suffix(".seeded.json").read_text())
    return {
        "run50": (f"/runs/{seeded['run50']}", 50, False),
        "run200": (f"/runs/{seeded['run200']}", 200, True),
        "keys": (f"/runs/{seeded['keys']}", 40, False),
        "compare": ("/compare?runs=" + ",".join(seeded["compare"]), 20, False),
    }


def shifts(context, path: str, settle_ms: int) -> tuple[float, list]:
    page = context.new_page()
    page.goto(path)
    page.wait_for_timeout(settle_ms)
    found = page.evaluate("window.__shifts")
    page.close()
    return sum(value for _, value, _ in found), found


def load(page, path: str, expected: int, scroll: bool) -> None:
    page.goto(path)
    page.wait_for_function(FIRST_SCREEN, timeout=300_000, polling=50)
    if scroll:
        page.evaluate(SCROLL_THROUGH, expected)
    page.wait_for_function("() => window.__probe.allDrawn !== null", timeout=300_000)


def main_thread(browser, context, path: str, expected: int, scroll: bool) -> tuple[float, list]:
    """(ms to the last chart drawn, [(event, own ms, count)]) of one load after a warm-up."""
    page = context.new_page()
    load(page, path, expected, scroll)
    page.close()
    page = context.new_page()
    categories = ["devtools.timeline", "disabled-by-default-devtools.timeline"]
    browser.start_tracing(page=page, categories=categories)
    load(page, path, expected, scroll)
    drawn = page.evaluate("window.__probe.allDrawn")
    events = json.loads(browser.stop_tracing())["traceEvents"]
    page.close()
    main = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"
    }
    spans = sorted(
        (e for e in events if (e["pid"], e["tid"]) in main and e.get("ph") == "X" and "dur" in e),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    own: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    open_spans: list[tuple[float, str]] = []  # (end, name) of the spans around this one
    for e in spans:
        while open_spans and open_spans[-1][0] <= e["ts"]:
            open_spans.pop()
        if open_spans:
            own[open_spans[-1][1]] -= e["dur"]
        own[e["name"]] += e["dur"]
        count[e["name"]] += 1
        open_spans.append((e["ts"] + e["dur"], e["name"]))
    return drawn, [(name, us / 1000, count[name]) for name, us in own.most_common(15)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="seeded by chart_grid.py")
    parser.add_argument("--src", default=SRC, help="the server (and dashboard) code to run")
    parser.add_argument("--part", choices=("shifts", "trace"), default="shifts")
    parser.add_argument("--page", choices=("run50", "run200", "keys", "compare"), default="run200")
    parser.add_argument("--settle-ms", type=int, default=4000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"load average at start: {os.getloadavg()}; code: {args.src}", flush=True)
    known = pages(args.data_dir)
    proc, url = start_server(["--data-dir", str(args.data_dir)], args.src)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
            if args.part == "shifts":
                context.add_init_script(SHIFTS)
                for name, (path, _, _) in known.items():
                    total, found = shifts(context, path, args.settle_ms)
                    print(f"{name}: cumulative layout shift {total:.4f}", flush=True)
                    for at, value, moved in found:
                        print(f"  {at} ms: {value:.4f} {', '.join(moved[:4])}", flush=True)
            else:
                path, expected, scroll = known[args.page]
                context.add_init_script(PROBE.replace("EXPECTED", str(expected)))
                drawn, rows = main_thread(browser, context, path, expected, scroll)
                print(f"{args.page}: all drawn at {drawn:,.0f} ms; main thread, own time:")
                for name, ms, n in rows:
                    print(f"  {ms:8.1f} ms  {n:5d}  {name}", flush=True)
            browser.close()
    finally:
        stop(proc)
    print(f"load average at end: {os.getloadavg()}", flush=True)


def stop(proc) -> None:
    proc.terminate()
    proc.wait(30)


if __name__ == "__main__":
    main()
