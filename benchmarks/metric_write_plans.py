"""
The plans of the metric write path (store/metrics.py: points upserted, keys' last steps, block
summaries with their last values) on PostgreSQL and SQLite, for issue 21's worry that a
metrics upload scans a run's points: every statement one upload runs, explained.

    uv run python benchmarks/metric_write_plans.py            # both databases, ~1 minute quiet

A real server (in process) takes two loads over HTTP: 5 runs x 20 keys x 20,000 steps in
uploads of 5,000 steps, then 40 runs x 20 uploads of 10 rows of 2 keys (the SDK's small
batches, runs interleaved). On PostgreSQL (the throwaway cluster of tests/services.py)
auto_explain logs the plan of every statement the server ran, and the report counts those
that scan metric_points or metric_blocks sequentially. Then one more upload of 400 points is
written in a transaction that is rolled back, its statements captured, and each explained:
EXPLAIN (ANALYZE) on PostgreSQL, with the custom plan and with the generic plan a prepared
statement falls back to; EXPLAIN QUERY PLAN on SQLite. A plan line mentioning a metric table
without its primary key ("Seq Scan", "SCAN metric_points") is printed as a finding.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import sqlalchemy as sa
from psycopg.sql import Literal
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services
from tests.services import PostgresCluster, postgres_bin  # noqa: E402

from openruns.server import serve_in_thread  # noqa: E402
from openruns.server.store import metrics  # noqa: E402

SCAN = re.compile(r"Seq Scan on metric_(points|blocks)|SCAN metric_(points|blocks)\b")


def rows(steps: range, keys: list[str]) -> bytes:
    return b"".join(
        orjson.dumps({"step": s, "values": {k: float(s % 13) for k in keys}}) + b"\n" for s in steps
    )


def load(data_dir: Path, **settings: Any) -> None:
    handle = serve_in_thread(data_dir=data_dir, **settings)
    headers = {"Content-Type": "application/x-ndjson"}
    try:
        with httpx.Client(base_url=handle.url + "/api/v1", timeout=300) as http:
            keys = [f"k{i}" for i in range(20)]
            for _ in range(5):
                rid = http.post("/runs", json={"kind": "train"}).json()["id"]
                for lo in range(0, 20_000, 5000):
                    body = rows(range(lo, lo + 5000), keys)
                    http.post(f"/runs/{rid}/metrics", content=body, headers=headers)
            small = [http.post("/runs", json={"kind": "train"}).json()["id"] for _ in range(40)]
            for lo in range(0, 200, 10):
                for rid in small:
                    body = rows(range(lo, lo + 10), ["loss", "reward"])
                    answer = http.post(f"/runs/{rid}/metrics", content=body, headers=headers)
                    answer.raise_for_status()
    finally:
        handle.stop()


def captured_upload(url: str) -> list[tuple[str, Any]]:
    """The statements write_points runs for 400 points of the last big run (rolled back)."""
    engine = sa.create_engine(url)
    statements: list[tuple[str, Any]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def capture(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        if not executemany and statement.lstrip().upper().startswith(("SELECT", "UPDATE")):
            statements.append((statement, parameters))

    with engine.connect() as conn:
        run_seq = conn.execute(sa.text("SELECT min(seq) + 4 FROM runs")).scalar_one()
        points = {(f"k{i}", 20_000 + s): (1.0, None) for i in range(20) for s in range(20)}
        metrics.write_points(conn, run_seq, points)
        conn.rollback()
    engine.dispose()
    return statements[1:]  # the first is ours


def explain(url: str, postgres: bool) -> int:
    findings = 0
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for statement, params in captured_upload(url):
            plans = {}
            if postgres:
                cursor.execute("EXPLAIN (ANALYZE) " + statement, params)
                plans["custom"] = "\n".join(r[0] for r in cursor.fetchall())
                names: list[str] = []

                def number(match: re.Match[str], names: list[str] = names) -> str:
                    if match.group(1) not in names:
                        names.append(match.group(1))
                    return f"${names.index(match.group(1)) + 1}"

                text = re.sub(r"%\((\w+)\)s", number, statement)
                cursor.execute("SET plan_cache_mode = force_generic_plan")
                cursor.execute("PREPARE q AS " + text)
                raw = conn.connection.driver_connection
                args = ", ".join(Literal(params[n]).as_string(raw) for n in names)  # typed here
                cursor.execute(f"EXPLAIN (ANALYZE) EXECUTE q({args})")
                plans["generic"] = "\n".join(r[0] for r in cursor.fetchall())
                cursor.execute("DEALLOCATE q")
                cursor.execute("RESET plan_cache_mode")
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
                plans["plan"] = "\n".join(str(r[-1]) for r in cursor.fetchall())
            conn.rollback()
            print("--", " ".join(statement.split())[:160])
            for kind, plan in plans.items():
                probes = [line.strip() for line in plan.splitlines() if "metric_" in line]
                print(f"   {kind}: " + " | ".join(probes)[:400])
                if SCAN.search(plan):
                    findings += 1
                    print(f"   FINDING ({kind}): a metric table scanned\n{plan}")
    engine.dispose()
    return findings


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="openruns-plans-") as tmp:
        print("== SQLite")
        load(Path(tmp) / "sqlite")
        database = next((Path(tmp) / "sqlite").rglob("*.db"))
        findings = explain(f"sqlite:///{database}", postgres=False)
        print(f"SQLite: {findings} statements scanning a metric table")
        bindir = postgres_bin()
        if bindir is None:
            sys.exit("PostgreSQL is not installed: apt-get install postgresql")
        cluster = PostgresCluster(bindir).start()
        try:
            admin = cluster._admin
            admin.execute("LOAD 'auto_explain'")
            admin.execute("ALTER SYSTEM SET session_preload_libraries = 'auto_explain'")
            admin.execute("ALTER SYSTEM SET auto_explain.log_min_duration = 0")
            admin.execute("ALTER SYSTEM SET auto_explain.log_nested_statements = on")
            admin.execute("SELECT pg_reload_conf()")
            url = cluster.new_database()
            print("== PostgreSQL")
            load(Path(tmp) / "pg", database_url=url)
            logged = cluster.log.read_text(errors="replace").split("duration:")
            scans = [plan for plan in logged if SCAN.search(plan)]
            print(f"auto_explain: {len(logged) - 1} plans, {len(scans)} scanning a metric table")
            for plan in scans[:5]:
                print(plan[:2000])
            admin.execute("ALTER SYSTEM RESET ALL")
            admin.execute("SELECT pg_reload_conf()")
            findings = explain(url, postgres=True)
            print(f"PostgreSQL: {findings} plans scanning a metric table")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
