"""
What the benchmarks that fill a store themselves and read it through a server share: the
command line, each store configuration in turn (SQLite + a data directory, then a database in a
throwaway, durable PostgreSQL cluster of tests/services.py), a server on the filled store, and
the p50 / p95 of a read's timings.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import server_process

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services

from tests.services import PostgresCluster, postgres_bin  # noqa: E402

# (label, SQLAlchemy URL, `openruns server` arguments, how many, repeats, scratch directory)
Backend = Callable[[str, str, list[str], int, int, Path], None]


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(doc: str, size: tuple[str, int], repeats: int, backend: Backend) -> None:
    """A benchmark's command line (`--SIZE N`, `--repeats`, `--only sqlite|postgres`) and its
    `backend` on each store in turn, in a scratch directory removed after."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(f"--{size[0]}", type=int, default=size[1], dest="size")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    print(f"load average at the start: {load()}")
    with tempfile.TemporaryDirectory(prefix="openruns-bench-") as scratch:
        tmp = Path(scratch)
        if args.only != "postgres":
            data = tmp / "sqlite"
            data.mkdir()
            url = f"sqlite:///{data / 'openruns.db'}"
            backend("SQLite", url, ["--data-dir", str(data)], args.size, args.repeats, tmp)
        if args.only != "sqlite":
            bindir = postgres_bin()
            if bindir is None:
                sys.exit(f"{sys.argv[0]} needs PostgreSQL: apt-get install postgresql")
            cluster = PostgresCluster(bindir, durable=True).start()
            try:
                db = cluster.new_database()
                url = db.replace("postgresql://", "postgresql+psycopg://")
                server_args = ["--data-dir", str(tmp / "pg-data"), "--db", db]
                backend("PostgreSQL", url, server_args, args.size, args.repeats, tmp)
            finally:
                cluster.stop()
    print(f"\nload average at the end: {load()}")


@contextlib.contextmanager
def serving(url: str, server_args: list[str], log: Path) -> Iterator[str]:
    """`openruns server` (no search indexer) on the store just filled at `url`, PostgreSQL's
    statistics taken first: its URL, the load average printed before and after."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("ANALYZE")
    proc, server_url = server_process.start_server(server_args, log, search_index=False)
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        yield server_url
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        proc.terminate()
        proc.wait(30)


def p50_p95(times: list[float]) -> tuple[float, float]:
    """Median and 95th percentile of `times` (seconds), in milliseconds."""
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000
