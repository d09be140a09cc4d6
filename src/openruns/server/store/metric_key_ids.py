"""
A run's metric keys by name: the ids its points are stored under (metric_keys), found, or made
for an upload's new names. Writes (metrics.py), step and time reads (metric_reads.py,
metric_times.py) and the W&B wire's forks all look keys up here.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, insert, select

from .schema import metric_keys
from .sql import among

__all__ = ["key_ids", "known_ids", "run_keys"]


def key_ids(conn: Connection, run_seq: int, names: Iterable[str], create: bool) -> dict[str, int]:
    """{name: key id} for the run's metric keys among `names` (created when `create`)."""
    wanted = sorted(set(names))
    found: dict[str, int] = {}
    for clause in among(conn, metric_keys.c.name, wanted):
        query = select(metric_keys.c.name, metric_keys.c.id).where(
            metric_keys.c.run_seq == run_seq, clause
        )
        found.update((name, key_id) for name, key_id in conn.execute(query))
    missing = [n for n in wanted if n not in found]
    if create and missing:
        conn.execute(insert(metric_keys), [{"run_seq": run_seq, "name": n} for n in missing])
        found.update(key_ids(conn, run_seq, missing, create=False))
    return found


def run_keys(conn: Connection, run_seq: int) -> list[tuple[str, int]]:
    """(name, key id) of every metric key of a run, by name."""
    query = select(metric_keys.c.name, metric_keys.c.id).where(metric_keys.c.run_seq == run_seq)
    return [(name, key_id) for name, key_id in conn.execute(query.order_by(metric_keys.c.name))]


def known_ids(conn: Connection, run_seq: int, names: Iterable[str]) -> dict[str, int]:
    """{name: key id} of those of `names` the run has, in the order asked (each name once)."""
    wanted = list(names)
    found = key_ids(conn, run_seq, wanted, create=False)
    return {n: found[n] for n in dict.fromkeys(wanted) if n in found}
