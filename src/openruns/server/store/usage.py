"""
What the stores hold, per team, project and run (issue 22): `openruns server usage` and
`GET /api/v1/usage`.

Blob bytes are exact (each blob's size is recorded with the row naming it). Row bytes are an
estimate: rows counted per table times the bytes a row of it takes in either database with its
indexes (ROW_BYTES, measured on SQLite; PostgreSQL's are of the same order), plus the text a
row carries where it varies (console lines, annotations). Both databases report sizes only per
table, never per run, so an exact per-run figure would mean reading every row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, func, select

from .schema import (
    annotations_table,
    episodes,
    log_totals,
    metric_chunks,
    metric_keys,
    metric_points,
    metric_time_points,
    prime_objects,
    runs,
    segments,
    wandb_files,
)

__all__ = ["ROW_BYTES", "usage"]

# Bytes per row with its index entries (SQLite: `dbstat` over a store of 1 M rows each).
ROW_BYTES = {"metric_rows": 40, "metric_time_rows": 40, "episodes": 160, "annotations": 80}
_COUNTS = ("metric_rows", "metric_time_rows", "episodes", "annotations", "log_lines")
_FIGURES = ("blobs", "blob_bytes", "row_bytes", *_COUNTS)


def usage(
    conn: Connection, team_id: str | None, project: str | None, run_id: str | None
) -> dict[str, Any]:
    """{"total", "teams", "projects", "runs"}: each run's figures (_FIGURES) and their sums."""
    chosen = select(runs.c.seq)
    if team_id is not None:
        chosen = chosen.where(runs.c.team_id == team_id)
    if project is not None:
        chosen = chosen.where(runs.c.project == project)
    if run_id is not None:
        chosen = chosen.where(runs.c.id == run_id)
    listed = select(runs.c.seq, runs.c.team_id, runs.c.project, runs.c.id, runs.c.name).where(
        runs.c.seq.in_(chosen)
    )
    per_run: dict[int, dict[str, Any]] = {}
    for seq, team, proj, rid, name in conn.execute(listed.order_by(runs.c.seq)):
        per_run[seq] = {"team_id": team, "project": proj, "id": rid, "name": name}
        per_run[seq].update(dict.fromkeys(_FIGURES, 0))
    subset = chosen.scalar_subquery()

    def add(query: Select[Any], *names: str) -> None:
        for seq, *values in conn.execute(query):
            if seq in per_run:
                for name, value in zip(names, values, strict=True):
                    per_run[seq][name] += int(value or 0)

    for table in (segments, prime_objects, wandb_files):
        add(
            select(table.c.run_seq, func.count(), func.sum(table.c.bytes))
            .where(table.c.run_seq.in_(subset))
            .group_by(table.c.run_seq),
            "blobs",
            "blob_bytes",
        )
    for table, name in ((metric_points, "metric_rows"), (metric_time_points, "metric_time_rows")):
        add(
            select(metric_keys.c.run_seq, func.count())
            .select_from(table.join(metric_keys, metric_keys.c.id == table.c.key_id))
            .where(metric_keys.c.run_seq.in_(subset))
            .group_by(metric_keys.c.run_seq),
            name,
        )
    # A chunk's points count as metric rows (the figure is points, wherever they are stored),
    # and its bytes are its columns' and ~100 a row, less what ROW_BYTES adds for its points
    # below.
    c = metric_chunks
    columns = (
        func.length(c.c.steps) + func.length(c.c.vals) + func.coalesce(func.length(c.c.times), 0)
    )
    add(
        select(
            metric_keys.c.run_seq,
            func.sum(c.c.count),
            func.sum(columns + 100 - c.c.count * ROW_BYTES["metric_rows"]),
        )
        .select_from(c.join(metric_keys, metric_keys.c.id == c.c.key_id))
        .where(metric_keys.c.run_seq.in_(subset))
        .group_by(metric_keys.c.run_seq),
        "metric_rows",
        "row_bytes",
    )
    add(
        select(episodes.c.run_seq, func.count())
        .where(episodes.c.run_seq.in_(subset))
        .group_by(episodes.c.run_seq),
        "episodes",
    )
    a = annotations_table
    add(
        select(a.c.run_seq, func.count(), func.sum(func.length(a.c.body)))
        .where(a.c.run_seq.in_(subset))
        .group_by(a.c.run_seq),
        "annotations",
        "row_bytes",
    )
    add(
        select(log_totals.c.run_seq, log_totals.c.lines, log_totals.c.bytes).where(
            log_totals.c.run_seq.in_(subset)
        ),
        "log_lines",
        "row_bytes",
    )
    for row in per_run.values():
        row["row_bytes"] += sum(row[name] * size for name, size in ROW_BYTES.items())
    return _totals(list(per_run.values()))


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    teams: dict[str, dict[str, Any]] = {}
    projects: dict[tuple[str, str], dict[str, Any]] = {}
    total: dict[str, Any] = {"runs": 0, **dict.fromkeys(_FIGURES, 0)}
    for row in rows:
        team = teams.setdefault(
            row["team_id"], {"team_id": row["team_id"], "runs": 0, **dict.fromkeys(_FIGURES, 0)}
        )
        key = (row["team_id"], row["project"])
        proj = projects.setdefault(
            key,
            {"team_id": key[0], "project": key[1], "runs": 0, **dict.fromkeys(_FIGURES, 0)},
        )
        for bucket in (team, proj, total):
            bucket["runs"] += 1
            for name in _FIGURES:
                bucket[name] += row[name]
    by_size = sorted(rows, key=lambda r: -(r["blob_bytes"] + r["row_bytes"]))
    return {
        "total": total,
        "teams": sorted(teams.values(), key=lambda t: t["team_id"]),
        "projects": sorted(projects.values(), key=lambda p: (p["team_id"], p["project"])),
        "runs": by_size,
    }
