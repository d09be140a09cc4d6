"""
Queries across runs (issues 21 and 22): 100,000 runs in one project, each with a config
(lr, batch size, optimizer), a summary (reward, loss), two tags of 20, a status, and a
`reward` metric of 5 steps, written straight into the store (bulk inserts, not the API), then
read through a real `openruns server` over HTTP:

  list newest first; filter by status, by tag, by name (a substring); sort by a summary
  value; a config + summary filter; sort by the latest value of a metric; the second page of
  a sort (the keyset cursor).

Each is asked `--repeats` times after one warm-up: p50 / p95 of the whole HTTP answer (50 runs a
page). Then the plans (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL) of the sort and
the filter, so what is indexed and what scans is on record. SQLite and PostgreSQL (the
throwaway cluster of tests/services.py, durable) in turn.

    uv run python benchmarks/runs_query.py              # 100,000 runs, ~10 minutes
    uv run python benchmarks/runs_query.py --runs 10000 # a smoke run

Results go in docs/benchmarks.md, section "Queries across runs".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services

from tests.services import PostgresCluster, postgres_bin  # noqa: E402

import server_process  # noqa: E402
from openruns.server.queries.language import parse_filter, parse_sort  # noqa: E402
from openruns.server.store import Store  # noqa: E402
from openruns.server.store.run_query import RunQuery, page_statement  # noqa: E402
from openruns.server.store.schema import (  # noqa: E402
    metric_keys,
    metric_points,
    run_tags,
    runs,
)

PROJECT = "fleet"
TAGS = [f"tag-{i}" for i in range(20)]
STATUSES = ["completed"] * 6 + ["failed", "crashed", "running", "stopped"]
CHUNK = 5_000


def generate(url: str, count: int) -> float:
    """Write `count` runs into the store at `url`; seconds taken."""
    rng = random.Random(22)
    store = Store.open(url)
    started = time.perf_counter()
    try:
        for first in range(0, count, CHUNK):
            store.db.write_sync(lambda conn, first=first: _chunk(conn, rng, first, count))
    finally:
        store.close()
    return time.perf_counter() - started


def _chunk(conn: Any, rng: random.Random, first: int, count: int) -> None:
    rows, tags, keys, points = [], [], [], []
    last = min(first + CHUNK, count)
    for i in range(first, last):
        lr = rng.choice([1e-6, 3e-6, 1e-5, 3e-5, 1e-4])
        values = {"lr": lr, "batch_size": rng.choice([32, 64, 128]), "optimizer": "adamw"}
        summary = {"reward": round(rng.random(), 4), "loss": round(rng.random() * 3, 4)}
        names = rng.sample(TAGS, 2)
        rows.append(
            {
                "id": f"run-{i:07d}",
                "team_id": "default",
                "kind": "train",
                "name": f"sweep-{i % 1000}-lr{lr:g}-{i}",
                "environments": "[]",
                "tags": orjson.dumps(names).decode(),
                "config": orjson.dumps(
                    {"format": "json", "text": orjson.dumps(values).decode()}
                ).decode(),
                "config_values": orjson.dumps(values).decode(),
                "status": rng.choice(STATUSES),
                "summary": orjson.dumps(summary).decode(),
                "losses": "{}",
                "created_at": 1.7e9 + i,
                "updated_at": 1.7e9 + i,
                "finished_at": 1.7e9 + i + 60,
                "last_heartbeat_at": float("inf"),
                "project": PROJECT,
                "status_history": "[]",
            }
        )
    seqs = conn.execute(insert(runs).returning(runs.c.seq, runs.c.id), rows).all()
    seq_of = {run_id: seq for seq, run_id in seqs}
    for row in rows:
        seq = seq_of[row["id"]]
        tags += [{"run_seq": seq, "tag": t} for t in orjson.loads(row["tags"])]
        keys.append({"run_seq": seq, "name": "reward"})
    conn.execute(insert(run_tags), tags)
    key_rows = conn.execute(
        insert(metric_keys).returning(metric_keys.c.id),
        keys,
    )
    for (key_id,) in key_rows.all():
        points += [
            {"key_id": key_id, "step": s, "value": rng.random(), "ts": 1.7e9 + s} for s in range(5)
        ]
    conn.execute(insert(metric_points), points)


QUERIES: list[dict[str, Any]] = [
    {},
    {"status": "failed"},
    {"tag": "tag-7"},
    {"name": "-lr0.0001-99"},
    {"filter": "status in (failed, crashed)"},
    {"filter": "tag = tag-7 and name contains sweep-99"},
    {"sort": "-summary.reward"},
    {"filter": "config.lr < 1e-5 and summary.reward > 0.5"},
    {"filter": "config.lr = 1e-4", "sort": "-summary.reward"},
    {"sort": "-metric:reward"},
    {"filter": "metric:reward > 0.99"},
    {"columns": "config.lr,summary.reward,metric:reward"},
]


def _label(params: dict[str, Any]) -> str:
    return "; ".join(f"{k}={v}" for k, v in params.items()) or "list, newest first"


def measure(url: str, repeats: int) -> list[tuple[str, float, float]]:
    out = []
    with httpx.Client(base_url=url + "/api/v1", timeout=120) as client:
        for params in QUERIES:
            label = _label(params)
            query = {"project": PROJECT, "limit": 50, **params}
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                response = client.get("/runs", params=query)
                times.append(time.perf_counter() - start)
                response.raise_for_status()
            out.append((label, *_p50_p95(times[1:])))
        # the second page of a sort by a summary value: the keyset cursor
        first = client.get(
            "/runs", params={"project": PROJECT, "limit": 50, "sort": "-summary.reward"}
        ).json()
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            client.get(
                "/runs",
                params={
                    "project": PROJECT,
                    "limit": 50,
                    "sort": "-summary.reward",
                    "cursor": first["next_cursor"],
                },
            ).raise_for_status()
            times.append(time.perf_counter() - start)
        out.append(("page 2 of sort -summary.reward", *_p50_p95(times[1:])))
    return out


def _p50_p95(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def plans(url: str) -> list[tuple[str, float, list[str]]]:
    """Per query: the database's own time for one page (best of 5: CPU seconds of SQLite in
    this process, PostgreSQL's EXPLAIN ANALYZE execution time), which the machine's load
    inflates far less than the wall time of an HTTP answer, and its plan."""
    store = Store.open(url)
    out = []
    try:
        for filter_text, sort, after in (
            (None, "-summary.reward", None),
            (None, "-summary.reward", (0.999, 1)),
            ("config.lr < 1e-5 and summary.reward > 0.5", None, None),
            ("config.lr = 1e-4", "-summary.reward", None),
            (None, "-metric:reward", None),
        ):
            label = "; ".join(
                f"{k}={v}"
                for k, v in (("filter", filter_text), ("sort", sort), ("after", after))
                if v
            )
            query = RunQuery(
                where=parse_filter(filter_text) if filter_text else None,
                sort=parse_sort(sort) if sort else None,
                after=after,
            )

            def explain(conn: Any, query: RunQuery = query) -> tuple[float, list[str]]:
                base = select(runs).where(runs.c.project == PROJECT)
                statement = page_statement(conn, base, query, 51)
                sql = str(statement.compile(conn, compile_kwargs={"literal_binds": True}))
                # SQLite's "no limit" of the inner OFFSET 0 stays a parameter in literal SQL.
                sql = sql.replace("LIMIT ? OFFSET 0", "LIMIT -1 OFFSET 0")
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SET LOCAL jit = off"))  # as query_page does
                times = []
                for _ in range(5):
                    if conn.dialect.name == "sqlite":
                        start = time.process_time()
                        conn.execute(statement).all()
                        times.append((time.process_time() - start) * 1000)
                    else:
                        analyzed = conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql))
                        times.append(analyzed.scalar_one()[0]["Execution Time"])
                prefix = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
                rows = conn.execute(text(prefix + sql)).all()
                return min(times), [str(row[-1]) for row in rows]

            engine_ms, lines = store.db.read_sync(explain)
            out.append((label, engine_ms, lines))
    finally:
        store.close()
    return out


def run_backend(
    label: str, url: str, server_args: list[str], count: int, repeats: int, tmp: Path
) -> None:
    print(f"\n## {label}: {count:,} runs in one project")
    seconds = generate(url, count)
    print(f"generated in {seconds:.0f} s ({count / seconds:,.0f} runs/s, straight into the store)")
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("ANALYZE")
    proc, server_url = server_process.start_server(
        server_args, tmp / f"{label[:6]}.log", search_index=False
    )
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for name, p50, p95 in measure(server_url, repeats):
            print(f"| {name} | {p50:.0f} | {p95:.0f} |")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        proc.terminate()
        proc.wait(30)
    for name, engine_ms, lines in plans(url):
        print(f"{name}: {engine_ms:.0f} ms in the database; plan:")
        for line in lines:
            print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    print("load average at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="openruns-runs-query-") as name:
        tmp = Path(name)
        if args.only != "postgres":
            data = tmp / "sqlite"
            data.mkdir()
            url = f"sqlite:///{data / 'openruns.db'}"
            run_backend("SQLite", url, ["--data-dir", str(data)], args.runs, args.repeats, tmp)
        if args.only != "sqlite":
            bindir = postgres_bin()
            if bindir is None:
                sys.exit("benchmarks/runs_query.py needs PostgreSQL: apt-get install postgresql")
            cluster = PostgresCluster(bindir, durable=True).start()
            try:
                db = cluster.new_database()
                url = db.replace("postgresql://", "postgresql+psycopg://")
                args_pg = ["--data-dir", str(tmp / "pg-data"), "--db", db]
                run_backend("PostgreSQL", url, args_pg, args.runs, args.repeats, tmp)
            finally:
                cluster.stop()
    print("\nload average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    _ = subprocess  # started through server_process
    main()
