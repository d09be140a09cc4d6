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

import random
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import insert, select, text

import both_stores
from both_stores import p50_p95, serving
from openruns.server.queries.language import parse_filter, parse_sort
from openruns.server.store import Store
from openruns.server.store.run_query import RunQuery, page_statement
from openruns.server.store.schema import (
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
            out.append((label, *p50_p95(times[1:])))
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
        out.append(("page 2 of sort -summary.reward", *p50_p95(times[1:])))
    return out


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
    with serving(url, server_args, tmp / f"{label[:6]}.log") as server_url:
        for name, p50, p95 in measure(server_url, repeats):
            print(f"| {name} | {p50:.0f} | {p95:.0f} |")
    for name, engine_ms, lines in plans(url):
        print(f"{name}: {engine_ms:.0f} ms in the database; plan:")
        for line in lines:
            print(f"    {line}")


if __name__ == "__main__":
    _ = subprocess  # started through server_process
    both_stores.main(__doc__, ("runs", 100_000), 20, run_backend)
