"""
What an open, idle online run costs its process: CPU time and thread wakeups over a minute.

    uv run python benchmarks/idle_cpu.py              # 60 s (the issue's measurement)
    uv run python benchmarks/idle_cpu.py --seconds 10

A local `openruns server` runs in its own process (not counted). The producer opens an online
run, logs a few metrics and episodes and flushes, then sleeps; the script counts the process's
CPU seconds (user + system) and the context switches of its threads (`/proc/self/task/*/status`:
each voluntary switch is a thread going back to sleep, so their sum is the wakeups) over the
idle window, and lists the threads.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openruns  # noqa: E402
from online_load import start_server  # noqa: E402


def switches() -> int:
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "status").read_text()
        except FileNotFoundError:
            continue  # a thread that just ended
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="openruns-idle-"))
    server, url = start_server(tmp / "server")
    try:
        run = openruns.init(kind="train", name="idle", base_url=url, dir=tmp / "local")
        for step in range(10):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
        run.log_episodes([{"id": f"e{i}", "traces": []} for i in range(10)])
        run.flush()
        time.sleep(2.0)  # let the batch ages pass: from here the run is idle
        names = sorted(t.name for t in threading.enumerate())
        cpu0, switches0, t0 = cpu(), switches(), time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        used, woke = cpu() - cpu0, switches() - switches0
        run.finish()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"threads: {len(names)} ({', '.join(names)})")
    print(
        f"idle {elapsed:.0f} s: {used * 1000:.1f} ms of CPU = {100 * used / elapsed:.3f} % of a "
        f"core; {woke} context switches = {woke / elapsed:.2f} wakeups/s"
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
