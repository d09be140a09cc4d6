"""What every process a test starts pays before it does anything (issue 24): the seconds to
`import openruns` (an SDK script), to import the server's app, and for `openruns server` to
print that it listens, each in a fresh interpreter, the median of --repeat.

    uv run --frozen python benchmarks/process_start.py [--repeat 5] [--src DIR]

--src runs another tree's sources (e.g. `git archive HEAD~1 src | tar -x -C /tmp/before`), so
that two versions can be measured in turns under the same load; the load average is printed
at the start and the end (/proc/loadavg).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_IMPORT = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def import_seconds(module: str, env: dict[str, str]) -> float:
    code = _IMPORT.format(module=module)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    return float(out.stdout)


def server_start_seconds(env: dict[str, str]) -> float:
    """From the spawn to the line saying it listens (a fresh SQLite data directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        args = ["-m", "openruns.cli", "server", "--port", "0", "--data-dir", f"{tmp}/data"]
        started = time.monotonic()
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=out)
        try:
            while b"openruns server listening on" not in log.read_bytes():
                if proc.poll() is not None or time.monotonic() > started + 300:
                    raise RuntimeError(f"openruns server did not start: {log.read_text()}")
                time.sleep(0.02)
            return time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": args.src}
    print(f"load at the start: {Path('/proc/loadavg').read_text().strip()}")
    cases = {
        "import openruns": lambda: import_seconds("openruns", env),
        "import openruns.server.app": lambda: import_seconds("openruns.server.app", env),
        "openruns server to listening": lambda: server_start_seconds(env),
    }
    for name, measure in cases.items():
        runs = [measure() for _ in range(args.repeat)]
        print(f"{name}: median {statistics.median(runs):.2f} s over {args.repeat}")
    print(f"load at the end: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
