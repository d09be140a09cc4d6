"""
The SQL of the W&B wire (server/wandb/): functions over a Connection, called through the
store's door (`await store.write(wandb.upsert_run, ...)`), one transaction each (issue 19).

A W&B run is an ordinary row of `runs` (written through runs.py): its display name is the
name, notes, tags and group are the run's, its project is `runs.project`, its entity the team.
Everything it logs lands in the native tables: history rows are metric points at their step,
system rows time-keyed points, console lines log lines, the summary the run's summary. What
the wire needs beyond that is in wandb_runs (the SDK's config, line counts for a resume),
wandb_console (the line each writer may still rewrite) and wandb_files (uploaded files).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Connection, and_, or_, select, update

from ...spec import ConfigSource, RunStatus
from ..errors import ApiError, bad_request
from ..logs import MAX_LINE_CHARS
from . import logs, metric_chunks, metric_key_ids, metrics, runs
from .metrics import MetricPoints
from .rows import RunRow
from .schema import (
    log_lines,
    metric_keys,
    wandb_console,
    wandb_files,
    wandb_media,
    wandb_runs,
)
from .schema import runs as runs_table
from .sql import insert_ignore, lock_run, upsert

__all__ = [
    "ConfigUpdate",
    "MediaValue",
    "StreamUpdate",
    "add_file",
    "console_line_count",
    "copies_of",
    "file_names",
    "file_of_run",
    "glob_step_metrics",
    "ingest_stream",
    "media_items",
    "run_state",
    "set_episodes",
    "set_config_file",
    "set_metadata",
    "upsert_run",
]

_ERROR_LINES = 20  # a failed run's error: the last lines of its output
CONFIG_FILE = "config.yaml"


# A history row's media value: (step, key, the value, a table's run file, its artifact copy).
MediaValue = tuple[int | None, str, dict[str, Any], str | None, str | None]


@dataclass
class ConfigUpdate:
    """A config the SDK sent (UpsertBucket), read by server/wandb/history.py."""

    raw: dict[str, Any]  # W&B's {key: {"value": v}} JSON, `_wandb` included
    values: dict[str, Any]  # the run's config values
    step_metrics: dict[str, str]  # define_metric(name, step_metric=K)
    globs: list[tuple[str, str]]  # define_metric("eval/*", step_metric=K)
    branch: dict[str, Any] | None  # fork_from: {run_id, step}
    shared_mode: bool = False  # a writer of several (Settings(mode="shared"))


@dataclass
class StreamUpdate:
    """One file stream request, parsed (server/wandb/filestream.py)."""

    points: MetricPoints = field(default_factory=MetricPoints)
    history_end: int | None = None  # offset + lines of wandb-history.jsonl
    history_tail: str | None = None
    events_end: int | None = None
    summary: dict[str, Any] | None = None
    console_offset: int = 0
    console: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    exitcode: int | None = None
    # The images and tables of its history rows.
    media: list[MediaValue] = field(default_factory=list)


def run_state(conn: Connection, run_seq: int) -> dict[str, Any] | None:
    """The wandb_runs row of a run, JSON decoded; None for a run the wire did not create."""
    row = conn.execute(select(wandb_runs).where(wandb_runs.c.run_seq == run_seq)).mappings().first()
    if row is None:
        return None
    out = dict(row)
    for name in ("wandb_config", "metric_globs"):
        out[name] = orjson.loads(out[name])
    out["metadata"] = orjson.loads(out["metadata"]) if out["metadata"] else None
    return out


def upsert_run(
    conn: Connection,
    team_id: str,
    fields: dict[str, Any],
    config: ConfigUpdate | None,
    now: float,
    ids_per_team: bool,
) -> tuple[RunRow, bool]:
    """
    UpsertBucket: create run `fields["id"]` in the team (with its W&B row), or update it with
    the fields given (None: unchanged). `fields["resume"]`: a process starts on the run, so a
    run that ended runs again. `config`: the run's config until config.yaml arrives, its
    metric definitions, a fork's branch point.
    """
    run, created = runs.create_run(conn, team_id, fields, None, now, ids_per_team)
    seq = run["seq"]
    lock_run(conn, seq)
    # A run made otherwise (the native API) gets its W&B row when a W&B process writes to it.
    conn.execute(
        insert_ignore(conn, wandb_runs).values(
            run_seq=seq, entity=team_id, job_type=fields.get("job_type"), wandb_config="{}"
        )
    )
    changes = {k: fields[k] for k in ("description", "notes", "group", "tags") if fields.get(k)}
    if changes:  # (a new run has them but its notes: create_run takes none)
        runs.patch_run(conn, seq, changes, now)
    if fields.get("name") and not created:
        conn.execute(update(runs_table).where(runs_table.c.seq == seq).values(name=fields["name"]))
    if fields.get("job_type"):
        conn.execute(
            update(wandb_runs)
            .where(wandb_runs.c.run_seq == seq)
            .values(job_type=fields["job_type"])
        )
    if config is not None:
        _store_config(conn, seq, config, team_id)
    fresh = runs.get_run_by_seq(conn, seq)
    assert fresh is not None
    return fresh, created


def _store_config(conn: Connection, seq: int, config: ConfigUpdate, team_id: str) -> None:
    state = run_state(conn, seq)
    assert state is not None
    conn.execute(
        update(wandb_runs)
        .where(wandb_runs.c.run_seq == seq)
        .values(
            wandb_config=runs.dump_json(config.raw, "config"),
            metric_globs=runs.dump_json(config.globs, "config"),
        )
    )
    if file_of_run(conn, seq, CONFIG_FILE) is None:  # config.yaml, once uploaded, is the config
        try:
            source = ConfigSource.from_mapping(config.values).to_dict()
        except Exception as exc:  # an integer beyond 64 bits, an oversized config
            raise bad_request("invalid_config", f"the config cannot be stored: {exc}") from exc
        conn.execute(
            update(runs_table)
            .where(runs_table.c.seq == seq)
            .values(runs.config_columns(source, "config"))
        )
    known = [name for name, _ in metric_key_ids.run_keys(conn, seq)]
    axes = {**glob_step_metrics(config.globs, known), **config.step_metrics}
    if axes:
        metrics.set_step_metrics(conn, seq, dict(axes))
    if config.branch is not None and state["forked_from"] is None:
        _fork(conn, seq, team_id, config.branch)


def _fork(conn: Connection, seq: int, team_id: str, branch: dict[str, Any]) -> None:
    """`fork_from="<id>?_step=N"`: the new run starts with the parent's history up to N."""
    parent_id, step = branch.get("run_id"), branch.get("step")
    if not isinstance(parent_id, str) or not isinstance(step, (int, float)):
        raise bad_request("invalid_fork", f"fork_from names no run and step: {branch!r}")
    parent = runs.get_run(conn, parent_id, team_id)
    if parent is None:
        raise ApiError(404, "not_found", f"fork_from: no run {parent_id!r} in this entity")
    points = MetricPoints()
    axes: dict[str, str | None] = {}
    for name, key_id in metric_key_ids.run_keys(conn, parent["seq"]):
        for point_step, value, ts in metric_chunks.read(conn, key_id, 0, int(step)):
            points[(name, int(point_step))] = (value, ts)
    for name, step_metric in conn.execute(
        select(metric_keys.c.name, metric_keys.c.step_metric).where(
            metric_keys.c.run_seq == parent["seq"], metric_keys.c.step_metric.is_not(None)
        )
    ):
        axes[name] = step_metric
    metrics.write_points(conn, seq, points)
    if axes:
        metrics.set_step_metrics(conn, seq, axes)
    conn.execute(
        update(wandb_runs)
        .where(wandb_runs.c.run_seq == seq)
        .values(forked_from=f"{parent_id}?_step={int(step)}")
    )


def ingest_stream(
    conn: Connection, run_seq: int, chunk: StreamUpdate, now: float, max_log_bytes: int
) -> dict[str, Any]:
    """
    One file stream request: history and system points merged (a replay rewrites the same
    values), the summary merged, console lines appended, a heartbeat, and with `complete` the
    run closed by its exit code (0 completed; else failed with the last lines of its output, or
    cancelled when a stop was requested). Answers what the SDK reads back (`stopped`), and the
    tables of rollouts now ready to be read (`tables`: their file came earlier).
    """
    lock_run(conn, run_seq)
    state = run_state(conn, run_seq)
    if state is None:
        raise bad_request("not_a_wandb_run", "this run was not created through the W&B wire")
    if chunk.points or chunk.points.by_time:
        metrics.write_points(conn, run_seq, chunk.points)
        if state["metric_globs"]:
            _apply_globs(conn, run_seq, state["metric_globs"], {k for k, _ in chunk.points})
    counts: dict[str, Any] = {}
    if chunk.history_end is not None and chunk.history_end > state["history_lines"]:
        counts["history_lines"] = chunk.history_end
    if chunk.history_tail is not None:
        counts["history_tail"] = chunk.history_tail
    if chunk.events_end is not None and chunk.events_end > state["events_lines"]:
        counts["events_lines"] = chunk.events_end
    if counts:
        conn.execute(update(wandb_runs).where(wandb_runs.c.run_seq == run_seq).values(counts))
    if chunk.summary:
        runs.patch_run(conn, run_seq, {"summary": chunk.summary}, now)
    if chunk.console or chunk.complete:
        _console(conn, run_seq, chunk, max_log_bytes)
    tables = _add_media(conn, run_seq, chunk.media) if chunk.media else []
    runs.heartbeat(conn, run_seq, now)
    run = runs.get_run_by_seq(conn, run_seq)
    assert run is not None
    if chunk.complete and run["status"] == RunStatus.RUNNING:
        status, error = _outcome(conn, run, chunk.exitcode)
        runs.finish_run(conn, run_seq, status, error, {}, now)
        tables += [t for t in _tables_left(conn, run_seq) if t not in tables]
    return {"stopped": run["stop_requested_at"] is not None, "tables": tables}


def _outcome(conn: Connection, run: RunRow, exitcode: int | None) -> tuple[str, str | None]:
    if not exitcode:
        return RunStatus.COMPLETED.value, None
    if run["stop_requested_at"] is not None:
        return RunStatus.CANCELLED.value, "stopped from the dashboard"
    tail = _last_lines(conn, run["seq"], "stderr") or _last_lines(conn, run["seq"], None)
    error = "\n".join(tail) if tail else ""
    return RunStatus.FAILED.value, (error or f"the script exited with code {exitcode}")


def _last_lines(conn: Connection, run_seq: int, stream: str | None) -> list[str]:
    query = select(log_lines.c.line).where(log_lines.c.run_seq == run_seq)
    if stream is not None:
        query = query.where(log_lines.c.stream == stream)
    rows = conn.execute(query.order_by(log_lines.c.offset.desc()).limit(_ERROR_LINES)).all()
    return [row[0] for row in reversed(rows)]


def glob_step_metrics(globs: list[tuple[str, str]], keys: list[str]) -> dict[str, str]:
    """{key: step metric} for each of `keys` a glob definition matches (the first one wins);
    a step metric is never drawn against itself."""
    out: dict[str, str] = {}
    for key in keys:
        for pattern, step in globs:
            if key != step and fnmatch.fnmatchcase(key, pattern):
                out[key] = step
                break
    return out


def _apply_globs(conn: Connection, run_seq: int, globs: list[list[str]], names: set[str]) -> None:
    matched = glob_step_metrics([(g, s) for g, s in globs], sorted(names))
    if not matched:
        return
    unset = {
        name
        for (name,) in conn.execute(
            select(metric_keys.c.name).where(
                metric_keys.c.run_seq == run_seq,
                metric_keys.c.name.in_(list(matched)),
                metric_keys.c.step_metric.is_(None),
            )
        )
    }
    if unset:
        metrics.set_step_metrics(conn, run_seq, {n: matched[n] for n in unset})


def _console(conn: Connection, run_seq: int, chunk: StreamUpdate, max_log_bytes: int) -> None:
    """
    Console lines at their line numbers, per writer (its label). The SDK rewrites a line in
    place (a progress bar's `\\r`), so the last line it sent stays open until a later line or
    the end closes it; lines before it are stored once, and a rewrite of one already stored
    is not applied (the log is append-only).
    """
    sources = {line["source"] for line in chunk.console} or {"main"}
    if chunk.complete:
        sources |= {
            s
            for (s,) in conn.execute(
                select(wandb_console.c.source).where(wandb_console.c.run_seq == run_seq)
            )
        }
    rows: list[dict[str, Any]] = []
    for source in sorted(sources):
        found = conn.execute(
            select(wandb_console.c.lines, wandb_console.c.open_line).where(
                and_(wandb_console.c.run_seq == run_seq, wandb_console.c.source == source)
            )
        ).first()
        stored = found[0] if found else 0
        pending: dict[int, dict[str, Any]] = {}
        if found and found[1]:
            pending[stored] = orjson.loads(found[1])
        for i, line in enumerate(chunk.console):
            number = chunk.console_offset + i
            if line["source"] == source and number >= stored:
                pending[number] = line
        if not pending and found:
            continue
        numbers = sorted(pending)
        closing = numbers if chunk.complete else numbers[:-1]
        rows.extend(_log_row(pending[n]) for n in closing)
        open_line = None if chunk.complete or not numbers else pending[numbers[-1]]
        lines = (numbers[-1] + (1 if open_line is None else 0)) if numbers else stored
        conn.execute(
            upsert(conn, wandb_console, ("run_seq", "source"), ("lines", "open_line")).values(
                run_seq=run_seq,
                source=source,
                lines=lines,
                open_line=orjson.dumps(open_line).decode() if open_line else None,
            )
        )
    if rows:
        logs.append(conn, run_seq, rows, max_log_bytes)


def _log_row(line: dict[str, Any]) -> dict[str, Any]:
    text = line["line"][:MAX_LINE_CHARS]
    return {**line, "line": text, "size": len(text.encode("utf-8", "surrogatepass")) + 1}


def console_line_count(conn: Connection, run_seq: int) -> int:
    """Console lines the SDK sent to the run, open ones included (what a resume continues)."""
    total = 0
    for lines, open_line in conn.execute(
        select(wandb_console.c.lines, wandb_console.c.open_line).where(
            wandb_console.c.run_seq == run_seq
        )
    ):
        total += lines + (1 if open_line else 0)
    return total


def add_file(
    conn: Connection, run_seq: int, name: str, blob_key: str, nbytes: int, now: float
) -> list[dict[str, Any]]:
    """Record an uploaded file (a later upload of the same name replaces it); the media values
    of tables in this file not read yet (the caller reads their rollouts)."""
    conn.execute(
        upsert(conn, wandb_files, ("run_seq", "name"), ("blob_key", "bytes", "created_at")).values(
            run_seq=run_seq, name=name, blob_key=blob_key, bytes=nbytes, created_at=now
        )
    )
    m = wandb_media.c
    return _unread_tables(
        conn, run_seq, or_(and_(m.path == name, m.copy.is_(None)), m.copy == name)
    )


def file_of_run(conn: Connection, run_seq: int, name: str) -> dict[str, Any] | None:
    row = (
        conn.execute(
            select(wandb_files).where(wandb_files.c.run_seq == run_seq, wandb_files.c.name == name)
        )
        .mappings()
        .first()
    )
    return dict(row) if row else None


def file_names(conn: Connection, run_seq: int) -> list[str]:
    query = select(wandb_files.c.name).where(wandb_files.c.run_seq == run_seq)
    return [name for (name,) in conn.execute(query.order_by(wandb_files.c.name))]


def media_items(conn: Connection, run_seq: int) -> list[dict[str, Any]]:
    """The media values of the run's history, by step then key."""
    query = (
        select(wandb_media)
        .where(wandb_media.c.run_seq == run_seq)
        .order_by(wandb_media.c.step, wandb_media.c.key)
    )
    return [
        {**dict(row), "value": orjson.loads(row["value"])} for row in conn.execute(query).mappings()
    ]


def copies_of(conn: Connection, run_seq: int, path: str) -> list[str]:
    """The artifact copies of a table's run file (media/table/...), if any."""
    query = select(wandb_media.c.copy).where(
        wandb_media.c.run_seq == run_seq,
        wandb_media.c.path == path,
        wandb_media.c.copy.is_not(None),
    )
    return sorted({copy for (copy,) in conn.execute(query)})


def set_episodes(conn: Connection, media_id: int, episodes: int) -> None:
    """A table's rollouts were read: how many (0: not a table of rollouts)."""
    conn.execute(update(wandb_media).where(wandb_media.c.id == media_id).values(episodes=episodes))


def _add_media(conn: Connection, run_seq: int, media: list[MediaValue]) -> list[dict[str, Any]]:
    """Keep each media value once; the tables among them ready to be read (their file is in:
    the artifact's copy when they have one, else the run file)."""
    for step, key, value, path, copy in media:
        conn.execute(
            insert_ignore(conn, wandb_media).values(
                run_seq=run_seq,
                step=step,
                key=key,
                value=runs.dump_json(value, key),
                path=path,
                copy=copy,
            )
        )
    names = [name for _, _, _, path, copy in media for name in (path, copy) if name]
    if not names:
        return []
    here = select(wandb_files.c.name).where(
        wandb_files.c.run_seq == run_seq, wandb_files.c.name.in_(names)
    )
    m = wandb_media.c
    return _unread_tables(
        conn, run_seq, or_(and_(m.copy.is_(None), m.path.in_(here)), m.copy.in_(here))
    )


def _tables_left(conn: Connection, run_seq: int) -> list[dict[str, Any]]:
    """At the run's end: the tables still unread whose run file is in (their artifact's copy
    never came), read from that."""
    here = select(wandb_files.c.name).where(wandb_files.c.run_seq == run_seq)
    return _unread_tables(conn, run_seq, wandb_media.c.path.in_(here))


def _unread_tables(conn: Connection, run_seq: int, where: Any) -> list[dict[str, Any]]:
    m = wandb_media.c
    query = select(m.id, m.step, m.key, m.path, m.copy)
    query = query.where(m.run_seq == run_seq, m.episodes.is_(None), m.path.is_not(None), where)
    return [dict(row) for row in conn.execute(query).mappings()]


def set_config_file(conn: Connection, run_seq: int, text: str, now: float) -> None:
    """config.yaml, byte for byte, becomes the run's config."""
    source = ConfigSource(text=text, format="yaml", filename=CONFIG_FILE).to_dict()
    conn.execute(
        update(runs_table)
        .where(runs_table.c.seq == run_seq)
        .values(**runs.config_columns(source, "config"), updated_at=now)
    )


def set_metadata(conn: Connection, run_seq: int, metadata: dict[str, Any]) -> None:
    """wandb-metadata.json (host, program, git commit, Python, GPU), shown with the run."""
    conn.execute(
        update(wandb_runs)
        .where(wandb_runs.c.run_seq == run_seq)
        .values(metadata=runs.dump_json(metadata, "metadata"))
    )
