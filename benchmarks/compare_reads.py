"""
The compare page's metric reads against a real `openruns server` process (issue 21): 20 runs x
20 metrics, read as the grid reads them (groups of 8 keys, 2 groups in flight), either a request
per run (`/runs/{id}/metrics`, the grid before b64634c) or one request per group for every run
(`GET /metrics?runs=...`). Prints each round's wall time and the server process's CPU time
(/proc/<pid>/stat), so the server's share of the page is measured apart from the browser's.

    uv run python benchmarks/chart_grid.py --data-dir /tmp/grid-data --part compare --seed-only
    uv run python benchmarks/compare_reads.py --data-dir /tmp/grid-data

The runs are those `chart_grid.py` seeded (their ids in DIR.seeded.json, "compare"); their keys
are read from the server. Results go in docs/benchmarks.md ("Compare, again").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import httpx

from metric_keys import SRC, start_server

KEYS_PER_READ = 8
READS_IN_FLIGHT = 2


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def round_of_reads(http: httpx.AsyncClient, runs: list[str], keys: list[str], one: bool):
    slots = asyncio.Semaphore(READS_IN_FLIGHT)

    async def read(group: list[str]) -> None:
        params = {"keys": ",".join(group), "max_points": 529}
        async with slots:
            if one:
                answers = [await http.get("/metrics", params={**params, "runs": ",".join(runs)})]
            else:
                answers = await asyncio.gather(
                    *(http.get(f"/runs/{run}/metrics", params=params) for run in runs)
                )
            for answer in answers:
                answer.raise_for_status()

    groups = [keys[i : i + KEYS_PER_READ] for i in range(0, len(keys), KEYS_PER_READ)]
    await asyncio.gather(*(read(group) for group in groups))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", default=SRC, help="the server code to run (a tree to compare)")
    args = parser.parse_args()
    runs = json.loads(args.data_dir.with_suffix(".seeded.json").read_text())["compare"]
    proc, url = start_server(["--data-dir", str(args.data_dir)], args.src)
    limits = httpx.Limits(max_connections=100)
    try:
        async with httpx.AsyncClient(base_url=url + "/api/v1", timeout=300, limits=limits) as http:
            keys = sorted(
                k["key"] for k in (await http.get(f"/runs/{runs[0]}/metrics/keys")).json()
            )
            for one in (False, True, False, True):
                shape = "one request per group" if one else "a request per run"
                for _ in range(args.rounds):
                    cpu, wall = cpu_seconds(proc.pid), time.perf_counter()
                    await round_of_reads(http, runs, keys, one)
                    print(
                        f"{shape:22s} {len(runs)} runs x {len(keys)} keys: "
                        f"wall {time.perf_counter() - wall:.2f} s, server CPU "
                        f"{cpu_seconds(proc.pid) - cpu:.2f} s, load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    asyncio.run(main())
