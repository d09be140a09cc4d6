"""
What console capture costs the process that prints: print() with and without it.

    uv run python benchmarks/console_capture.py            # 200,000 prints per variant
    uv run python benchmarks/console_capture.py --prints 50000

Each variant runs in a fresh interpreter whose stdout is /dev/null, so the real stream costs
almost nothing and the capture's share is as large as it can be (a terminal or a pipe makes
print() itself slower, and the capture's share smaller). Variants: no run; an offline run with
`capture_console=False`; an offline run with capture on (the default). Each prints a training
loop's line (80 characters): steadily (100 lines every 10 ms, a very chatty run) and in one
flood. Printed: microseconds per print() (the time spent in print calls, pauses excluded), and
for capture on, the lines kept and the characters dropped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

PRINTER = """
import sys, time
import openruns
variant, prints, burst, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
run = None
if variant != "no run":
    run = openruns.init(kind="train", mode="offline", dir=sys.argv[5],
                        capture_console=variant == "capture on", system_metrics_interval=0)
line = "step 123: loss 0.4321 reward 0.8765 lr 3.0e-06 tokens/s 12345.6 (some padding ..)"
busy = 0.0
for start in range(0, prints, burst):
    t0 = time.perf_counter()
    for i in range(burst):
        print(line)
    busy += time.perf_counter() - t0
    if pause:
        time.sleep(pause)
kept = dropped = 0
if run is not None:
    run.finish()
    kept = run._pipeline.stats.written.get("logs", 0)
    dropped = run.dropped_console_chars
print(f"{busy / prints * 1e6:.3f} {kept} {dropped}", file=sys.stderr)
"""


def measure(variant: str, prints: int, burst: int, pause: float, runs_dir: str) -> str:
    with open(os.devnull, "w") as devnull:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(PRINTER), variant, str(prints), str(burst)]
            + [str(pause), runs_dir],
            env={**os.environ, "PYTHONPATH": SRC},
            stdout=devnull,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
    per_print, kept, dropped = done.stderr.strip().splitlines()[-1].split()
    return f"{float(per_print):7.3f} µs/print   lines kept {kept:>7}   chars dropped {dropped}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prints", type=int, default=200_000)
    args = parser.parse_args()
    steady = args.prints // 4
    cases = (
        (f"{steady} prints, 100 every 10 ms (~10,000 lines/s)", steady, 100, 0.01),
        (f"{args.prints} prints in one flood", args.prints, args.prints, 0.0),
    )
    with tempfile.TemporaryDirectory(prefix="openruns-console-") as runs_dir:
        for label, prints, burst, pause in cases:
            print(f"{label}:")
            for variant in ("no run", "capture off", "capture on"):
                print(f"  {variant:12} {measure(variant, prints, burst, pause, runs_dir)}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
