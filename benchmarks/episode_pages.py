"""
Rollouts listings of one large run (issue 21's 10,000,000 episodes): the index rows of EPISODES
episodes of one run, and a neighbour run of a tenth of that, written straight into the store
(bulk inserts made by the database itself, no blobs: a listing reads only the index), then read
through a real `openruns server` over HTTP, 100 rows a page:

  a step's page sorted by reward; the run's first page by step, by reward, by -reward, filtered
  ok=true, filtered env=code; a page deep in each (from a cursor in the middle of the run); the
  turn from the rows with a value to the NULLs; a page among the NULLs; a filter that matches
  ~40 rows, all of the lowest reward (env=rare): its first page, and its whole walk. Then the
  per-step table (`/steps`) as the dashboard reads it: the newest page, an older one, a live
  poll, one step's row and a neighbour's, and the largest page the API gives.

The run: 100 episodes a step, 1 % without a step, rewards 0 or 1 (40 % each: ties by the
million), 10 % a fraction, 10 % none; ok 90 % true; env `code` for 1 in 53 (so not only the
episodes of one reward). Each read is asked
`--repeats` times after one warm-up: p50 / p95 of the whole HTTP answer. Then each page's plan
(EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL). SQLite, then PostgreSQL (the throwaway
cluster of tests/services.py, durable, ANALYZEd after the load).

    uv run python benchmarks/episode_pages.py                      # 10,000,000: ~15 minutes
    uv run python benchmarks/episode_pages.py --episodes 100000    # a smoke run

Results go in docs/benchmarks.md, section "Rollouts pages of a 10M-episode run".
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import event, insert, text

import both_stores
from both_stores import p50_p95, serving
from openruns.server.store import Store
from openruns.server.store.episodes import list_episodes
from openruns.server.store.schema import runs, segments

CHUNK = 500_000

# One row per episode made by the database from its number g (1..count) and the run.
_SELECT = """
SELECT {run}, 'episodes', 'ep-' || g,
  CASE WHEN g % 100 = 7 THEN NULL ELSE g / 100 END,
  CASE WHEN g % 10 < 4 THEN 0.0 WHEN g % 10 < 8 THEN 1.0 WHEN g % 10 = 8 THEN (g % 997) / 997.0
       ELSE NULL END,
  CASE WHEN g % 53 = 3 THEN 'code' WHEN g % 100003 = 0 AND g % 10 < 4 THEN 'rare'
       ELSE 'math' END, g % 10 <> 5, 'train', {segment}, 0, 1, 0, 1
"""
_COLUMNS = (
    "run_seq, stream, episode_id, step, reward, env, ok, kind, segment_id,"
    ' frame_offset, frame_length, "offset", length'
)


def generate(url: str, count: int) -> tuple[str, float]:
    """Write the big run and its neighbour into the store at `url`: (the run's id, seconds)."""
    store = Store.open(url)
    started = time.perf_counter()
    try:
        for name, size in (("neighbour", count // 10), ("big", count)):
            run, segment = store.db.write_sync(lambda conn, name=name: _run(conn, name))
            for first in range(0, size, CHUNK):
                last = min(first + CHUNK, size)
                sql = _SELECT.format(run=run, segment=segment)
                if url.startswith("sqlite"):
                    sql = (
                        f"WITH RECURSIVE n(g) AS (SELECT {first + 1} UNION ALL"
                        f" SELECT g + 1 FROM n WHERE g < {last}) {sql} FROM n"
                    )
                else:
                    sql = f"{sql} FROM generate_series({first + 1}, {last}) g".replace("%", "%%")
                statement = f"INSERT INTO episodes ({_COLUMNS}) {sql}"
                store.db.write_sync(lambda conn, s=statement: conn.exec_driver_sql(s))
    finally:
        store.close()
    return "big", time.perf_counter() - started


def _run(conn: Any, name: str) -> tuple[int, int]:
    row = {
        "id": name,
        "team_id": "default",
        "kind": "train",
        "name": name,
        "environments": "[]",
        "tags": "[]",
        "config": "null",
        "status": "running",
        "summary": "{}",
        "losses": "{}",
        "created_at": 1.7e9,
        "updated_at": 1.7e9,
        "last_heartbeat_at": float("inf"),
        "status_history": "[]",
    }
    seq = conn.execute(insert(runs).returning(runs.c.seq), row).scalar_one()
    segment = conn.execute(
        insert(segments).returning(segments.c.id),
        {
            "run_seq": seq,
            "stream": "episodes",
            "blob_key": f"none/{name}",
            "records": 0,
            "bytes": 0,
            "created_at": 1.7e9,
        },
    ).scalar_one()
    return seq, segment


def cursor(value: Any, seq: int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([value, seq])).decode().rstrip("=")


def reads(count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, path under the run, query) of each read; the cursors name a row in the middle of
    the run (its seqs follow the neighbour's count // 10)."""
    middle, last_step = count // 10 + count // 2, count // 100
    pages: list[tuple[str, dict[str, Any]]] = [
        ("a step's page, sort=-reward", {"step": count // 200, "sort": "-reward"}),
        ("first page, sort=step", {}),
        ("first page, sort=reward", {"sort": "reward"}),
        ("first page, sort=-reward", {"sort": "-reward"}),
        ("first page, ok=true", {"ok": "true"}),
        ("first page, env=code, sort=-reward", {"env": "code", "sort": "-reward"}),
        (
            "first page, env=rare (~40 rows, all of reward 0), sort=-reward",
            {"env": "rare", "sort": "-reward"},
        ),
        ("first page, env=rare, sort=step", {"env": "rare"}),
        ("deep page, sort=step", {"cursor": cursor(count // 200, middle)}),
        ("deep page, sort=reward", {"sort": "reward", "cursor": cursor(1.0, middle)}),
        ("deep page, sort=-reward", {"sort": "-reward", "cursor": cursor(0.0, middle)}),
        ("the turn to NULLs, sort=reward", {"sort": "reward", "cursor": cursor(1.0, 2**31 - 1)}),
        (
            "a page among the NULLs, sort=-reward",
            {"sort": "-reward", "cursor": cursor(None, middle)},
        ),
    ]
    return [(label, "episodes", {"limit": 100, **query}) for label, query in pages] + [
        ("the newest 500 steps (`/steps?order=desc&limit=500`, the run page)", "steps",
         {"order": "desc", "limit": 500}),
        ("500 steps from the middle (`after=`, Show more steps)", "steps",
         {"order": "desc", "limit": 500, "after": last_step // 2}),
        ("a live poll (`step_min=` the newest - 8)", "steps",
         {"order": "desc", "limit": 500, "step_min": last_step - 8}),
        ("a step's row (`step_min=step_max=`, the step page)", "steps",
         {"step_min": last_step // 2, "step_max": last_step // 2}),
        ("a neighbour (`after=`, `limit=1`, the step page)", "steps",
         {"order": "desc", "limit": 1, "after": last_step // 2}),
        ("10,000 steps (the API's largest page; its client reads them all so)", "steps",
         {"limit": 10_000}),
    ]  # fmt: skip


def measure(url: str, run_id: str, count: int, repeats: int) -> list[str]:
    out = []
    with httpx.Client(base_url=url + "/api/v1", timeout=120) as client:
        for label, path, params in reads(count):
            times, rows = [], 0
            for _ in range(repeats + 1):
                start = time.perf_counter()
                response = client.get(f"/runs/{run_id}/{path}", params=params)
                times.append(time.perf_counter() - start)
                if response.status_code != 200:
                    out.append(f"| {label} | {response.status_code}: {response.text[:120]} | |")
                    break
                body = response.json()
                rows = len(body["items"] if isinstance(body, dict) else body)
            else:
                p50, p95 = p50_p95(times[1:])
                out.append(f"| {label} | {rows} | {p50:.0f} | {p95:.0f} |")
        for sort in ("-reward", "step"):  # a rare filter's whole walk, page after page
            params: dict[str, Any] = {"env": "rare", "sort": sort, "limit": 100}
            start, requests, found, slowest = time.perf_counter(), 0, 0, 0.0
            while True:
                began = time.perf_counter()
                body = client.get(f"/runs/{run_id}/episodes", params=params).json()
                slowest = max(slowest, time.perf_counter() - began)
                requests, found = requests + 1, found + len(body["items"])
                if body["next_cursor"] is None:
                    break
                params["cursor"] = body["next_cursor"]
            out.append(
                f"| every page of env=rare, sort={sort}: {requests} requests, slowest "
                f"{slowest * 1000:.0f} ms | {found} | {(time.perf_counter() - start) * 1000:.0f} "
                "(all) | |"
            )
    return out


def plans(url: str, count: int) -> list[str]:
    """Each read's statements and their plans, as the store runs them."""
    store = Store.open(url)
    out = []
    try:
        engine = store.db.writer
        middle = count // 10 + count // 2
        sorts = {"step": count // 200, "reward": 1.0, "-reward": 0.0}
        for sort, value in sorts.items():
            for after in (None, (value, middle), (None, middle)):
                seen: list[tuple[str, Any]] = []

                def record(conn, cursor, statement, parameters, context, executemany, seen=seen):  # noqa: ANN001
                    seen.append((statement, parameters))

                event.listen(engine, "before_cursor_execute", record)
                with engine.connect() as conn:
                    big = conn.execute(text("SELECT seq FROM runs WHERE id = 'big'")).scalar_one()
                    seen.clear()
                    list_episodes(
                        conn, big, stream="episodes", step=None, sort=sort, limit=100, after=after
                    )
                event.remove(engine, "before_cursor_execute", record)
                prefix = "EXPLAIN QUERY PLAN " if url.startswith("sqlite") else "EXPLAIN "
                with engine.connect() as conn:
                    for statement, parameters in seen:
                        lines = [
                            str(r[-1]) for r in conn.exec_driver_sql(prefix + statement, parameters)
                        ]
                        out.append(f"sort={sort} after={after}: " + " / ".join(lines))
    finally:
        store.close()
    return out


def run_backend(
    label: str, url: str, server_args: list[str], count: int, repeats: int, tmp: Path
) -> None:
    print(f"\n## {label}: {count:,} episodes in one run (+ {count // 10:,} in a neighbour)")
    run_id, seconds = generate(url, count)
    print(f"generated in {seconds:.0f} s ({count * 1.1 / seconds:,.0f} index rows/s)")
    with serving(url, server_args, tmp / f"{label[:6]}.log") as server_url:
        print("| read | rows | p50 ms | p95 ms |\n| --- | ---: | ---: | ---: |")
        for line in measure(server_url, run_id, count, repeats):
            print(line)
    for line in plans(url, count):
        print("    " + line)


if __name__ == "__main__":
    both_stores.main(__doc__, ("episodes", 10_000_000), 10, run_backend)
