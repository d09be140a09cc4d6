"""
What an open, idle online run costs its process: CPU time and thread wakeups over a minute.

    uv run python benchmarks/idle_cpu.py              # 60 s (the issue's measurement)
    uv run python benchmarks/idle_cpu.py --seconds 10

A local `openruns server` runs in its own process (not counted). The producer opens an online
run, logs a few metrics and episodes and flushes, then sleeps; the script counts the process's
CPU seconds (user + system) and the context switches of its threads (`/proc/self/task/*/status`:
each voluntary switch is a thread going back to sleep, so their sum is the wakeups) over the
idle window, per thread. Twice: the system metrics sampler off (the upload pipeline alone),
then on (the default: a sample every 10 s, itself logged as a metrics row and uploaded).
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

TICK = os.sysconf("SC_CLK_TCK")


def per_thread() -> dict[int, tuple[float, int]]:
    """{native thread id: (CPU seconds, context switches)} of this process's threads."""
    out: dict[int, tuple[float, int]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue  # a thread that just ended
        switches = sum(
            int(line.split()[1])
            for line in status.splitlines()
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
        )
        out[int(task.name)] = ((int(stat[11]) + int(stat[12])) / TICK, switches)
    return out


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(url: str, local: Path, seconds: float, system_metrics: bool) -> None:
    run = openruns.init(
        kind="train",
        name="idle",
        base_url=url,
        dir=local,
        system_metrics_interval=None if system_metrics else 0,
    )
    for step in range(10):
        run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    run.log_episodes([{"id": f"e{i}", "traces": []} for i in range(10)])
    run.flush()
    time.sleep(2.0)  # let the batch ages pass: from here the run is idle
    names = {t.native_id: t.name for t in threading.enumerate()}
    cpu0, threads0, t0 = cpu(), per_thread(), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    used, threads1 = cpu() - cpu0, per_thread()
    run.finish()
    woke = sum(s - threads0.get(tid, (0, 0))[1] for tid, (_, s) in threads1.items())
    label = "on (default)" if system_metrics else "off"
    print(f"system metrics sampler {label}: {len(names)} threads")
    print(
        f"  idle {elapsed:.0f} s: {used * 1000:.1f} ms of CPU = {100 * used / elapsed:.3f} % of "
        f"a core; {woke} context switches = {woke / elapsed:.2f} wakeups/s"
    )
    for tid, (seconds_used, switched) in sorted(threads1.items()):
        before = threads0.get(tid, (0.0, 0))
        busy, wakes = seconds_used - before[0], switched - before[1]
        if busy or wakes:
            print(f"    {names.get(tid, tid)}: {busy * 1000:.0f} ms, {wakes} switches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="openruns-idle-"))
    server, url = start_server(tmp / "server")
    try:
        measure(url, tmp / "local", args.seconds, system_metrics=False)
        measure(url, tmp / "local", args.seconds, system_metrics=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
