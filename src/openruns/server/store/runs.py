"""
Run rows: create, read, list, patch, finish, heartbeat, crash sweep. Functions over a
Connection, called by Store inside one read or write transaction.

A run row comes back as a `rows.RunRow`: the JSON columns decoded, plus `seq` (internal key).
Statuses are spec.RunStatus values. Every rule that must hold across server replicas is
enforced by the database: a create replay finds the row the unique constraints kept (insert
or ignore, then read), finishing and crashing are compare-and-sets from `running`, a summary
merge holds the run's row lock, and the crash sweep skips rows another replica is sweeping.

The sweeper's crashed is a guess (the owner went silent), its owner's word is not (issue 20):
a run the sweeper crashed is still open to its owner. Its uploads are taken as from a running
run, its final status replaces the guess (a compare-and-set from running or swept), and a
heartbeat makes it running again. `status_by` says who set the current status (owner |
sweeper) and `status_history` every change after creation, so the run shows both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import orjson
from sqlalchemy import Connection, RowMapping, and_, delete, insert, or_, select, update

from ...identity import RUN_ID_PATTERN, invalid_run_id  # the SDK's rule, written once
from ...spec import RunStatus
from ..errors import ApiError, bad_request, conflict
from ..queries.config_values import config_values
from . import alerts, metrics, run_query
from .deletion import refuse_deleted_id
from .rows import ListedRun, RunRow
from .run_query import RunQuery
from .schema import run_tags, runs
from .sql import insert_ignore

__all__ = [
    "DEFAULT_PROJECT",
    "JSON_COLUMNS",
    "RUN_ID_PATTERN",
    "check_run_id",
    "config_columns",
    "create_run",
    "crash_stale",
    "dump_json",
    "finish_run",
    "get_run",
    "get_run_by_seq",
    "is_swept",
    "run_teams",
    "heartbeat",
    "list_runs",
    "patch_run",
    "request_stop",
    "require_running_or_grace",
    "stale_error",
]

JSON_COLUMNS = (
    "environments",
    "tags",
    "config",
    "training",
    "summary",
    "losses",
    "status_history",
)
RUNNING = RunStatus.RUNNING.value
CRASHED = RunStatus.CRASHED.value
OWNER, SWEEPER = "owner", "sweeper"  # who set a run's status (status_by)
# The runs an owner may still write to and close: running, or crashed by the sweeper's guess.
_OPEN_TO_OWNER = or_(
    runs.c.status == RUNNING, and_(runs.c.status == CRASHED, runs.c.status_by == SWEEPER)
)
TERMINAL = tuple(s.value for s in RunStatus if s.is_terminal())
NO_LOSSES = {"dropped_records": 0, "failed_records": {}}
DEFAULT_PROJECT = "default"  # the project of a run created without one (issue 19)


def check_run_id(run_id: str) -> None:
    """400 naming the rule (identity's message) unless `run_id` is a valid run id."""
    if (problem := invalid_run_id(run_id)) is not None:
        raise bad_request("invalid_run_id", problem)


def dump_json(value: Any, field: str) -> str:
    """JSON text for a column; 400 naming the field when the value cannot be stored."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:
        raise bad_request("invalid_field", f"{field}: {exc}") from exc


def config_columns(config: dict[str, Any] | None, field: str) -> dict[str, str | None]:
    """The config column and its parsed values (what `config.<path>` filters read), written
    together by every writer of a run's config."""
    try:
        values = config_values(config)
        parsed = None if values is None else orjson.dumps(values, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # a YAML value JSON cannot hold: the config is kept, not filterable
        parsed = None
    return {
        "config": _json_or_null(config, field),
        "config_values": None if parsed is None else parsed.decode(),
    }


def _run(row: RowMapping | dict[str, Any]) -> RunRow:
    out = dict(row)
    out.pop("config_values", None)  # read by filters only; the run shows its config
    for name in JSON_COLUMNS:
        if out[name] is not None:
            out[name] = orjson.loads(out[name])
    out["group"] = out.pop("group_name", None)  # "group" is an SQL keyword; the API says group
    return cast(RunRow, out)


def get_run(conn: Connection, run_id: str, team_id: str | None = None) -> RunRow | None:
    """The run `run_id` of team `team_id`. Ids are unique within a team; with no team (auth
    off, where ids are kept unique across teams at create) the first run made with that id."""
    query = select(runs).where(runs.c.id == run_id)
    if team_id is not None:
        query = query.where(runs.c.team_id == team_id)
    row = conn.execute(query.order_by(runs.c.seq).limit(1)).mappings().first()
    return _run(row) if row else None


def get_run_by_seq(conn: Connection, seq: int) -> RunRow | None:
    row = conn.execute(select(runs).where(runs.c.seq == seq)).mappings().first()
    return _run(row) if row else None


def run_teams(conn: Connection, run_id: str) -> list[tuple[int, str]]:
    """(seq, team) of every run with this id, oldest first (a run token names only the id)."""
    query = select(runs.c.seq, runs.c.team_id).where(runs.c.id == run_id).order_by(runs.c.seq)
    return [(seq, team) for seq, team in conn.execute(query)]


def create_run(
    conn: Connection,
    team_id: str,
    fields: dict[str, Any],
    create_key: str | None,
    now: float,
    ids_per_team: bool = True,
) -> tuple[RunRow, bool]:
    """
    Insert a run, or return the one this create already made: (run, created). A replayed
    Idempotency-Key, or an `id` that exists in the same team, returns the existing run. Ids are
    per team: another team's run with the same id is neither returned nor revealed. With
    `ids_per_team` false (auth off: one tenant, nothing hidden) an `id` taken by another team
    is a 409, so that a lookup by id alone stays unambiguous. `fields["resume"]`: an existing
    run that ended is running again (a process resumes it with an explicit id).
    `fields["heartbeat"]` false: no process heartbeats for the run (a scheduler created it), so
    silence never crashes it. An id whose run was deleted is a 409 naming the deletion unless
    `fields["reuse_deleted_id"]` (store/deletion.py).
    Two replicas racing with the same create both end with the same run: the insert ignores a
    conflict on either unique column, then reads.
    """
    existing = _existing(conn, team_id, fields["id"], create_key, ids_per_team)
    if existing is not None:
        if fields.get("resume"):
            conn.execute(
                update(runs)
                .where(runs.c.seq == existing["seq"])
                .values(
                    status=RUNNING,
                    error=None,
                    stop_requested_at=None,
                    finished_at=None,
                    updated_at=now,
                    last_heartbeat_at=now,
                    status_by=OWNER,
                )
            )
            if existing["status"] != RUNNING:
                _record_status(conn, existing["seq"], RUNNING, OWNER, now)
            existing = get_run_by_seq(conn, existing["seq"])
            assert existing is not None
        return existing, False
    if not fields.get("reuse_deleted_id"):
        refuse_deleted_id(conn, team_id, fields["id"])  # 409 naming the deletion (issue 22)
    tags = _unique(fields.get("tags") or [])
    created_at = min(now, fields.get("created_at") or now)  # a run's own start (openruns sync)
    values = {
        "id": fields["id"],
        "team_id": team_id,
        "create_key": create_key,
        "kind": fields["kind"],
        "name": fields.get("name"),
        "model": fields.get("model"),
        "framework": fields.get("framework"),
        "description": fields.get("description"),
        "environments": dump_json(fields.get("environments") or [], "environments"),
        "tags": dump_json(tags, "tags"),
        **config_columns(fields.get("config"), "config"),
        "training": _json_or_null(fields.get("training"), "training"),
        "status": RUNNING,
        "error": None,
        "summary": "{}",
        "losses": dump_json(NO_LOSSES, "losses"),
        "created_at": created_at,
        "updated_at": now,
        "finished_at": None,
        "last_heartbeat_at": _first_heartbeat(fields, created_at, now),
        "notes": None,
        "group_name": fields.get("group"),
        "project": fields.get("project") or DEFAULT_PROJECT,
        "stop_requested_at": None,
        "status_by": None,
        "status_history": "[]",
    }
    seq = conn.execute(
        insert_ignore(conn, runs).values(values).returning(runs.c.seq)
    ).scalar_one_or_none()
    if seq is None:  # another transaction created it first
        existing = _existing(conn, team_id, fields["id"], create_key, ids_per_team)
        assert existing is not None, "a conflicting run row must exist once it is committed"
        return existing, False
    _set_tags(conn, seq, tags)
    return {**_run(values), "seq": seq}, True


def _first_heartbeat(fields: dict[str, Any], created_at: float, now: float) -> float | None:
    """A scheduler's run has no owner process to heartbeat: a heartbeat "at infinity" is never
    stale (the convention of prime.NO_HEARTBEAT; the API shows it as null). A run uploaded later
    (a past created_at) is alive now, its uploader is: not stale before its finish."""
    if not fields.get("heartbeat", True):
        return math.inf
    return now if created_at < now else None


def _existing(
    conn: Connection, team_id: str, run_id: str, create_key: str | None, ids_per_team: bool
) -> RunRow | None:
    """The run this create already made (by Idempotency-Key, else by id), if any."""
    if create_key is not None:
        row = (
            conn.execute(
                select(runs).where(runs.c.team_id == team_id, runs.c.create_key == create_key)
            )
            .mappings()
            .first()
        )
        if row:
            return _run(row)
    existing = get_run(conn, run_id, team_id)
    if existing is None and not ids_per_team and get_run(conn, run_id) is not None:
        raise conflict("run_id_taken", f"run id {run_id!r} is already in use")
    return existing


def list_runs(
    conn: Connection,
    *,
    team_id: str | None,
    only_run: str | None,
    kind: str | None,
    status: str | None,
    name: str | None,
    tag: str | None,
    limit: int,
    before_seq: int | None,
    group: str | None = None,
    project: str | None = None,
    query: RunQuery | None = None,
) -> list[ListedRun]:
    """Newest first; up to `limit` runs with seq below `before_seq`. With a `query` (a filter,
    sort and columns, store/run_query.py) in its order from its cursor; each run then carries
    `sort_value` and `values` (the query's columns)."""
    select_runs = select(runs)
    if team_id is not None:
        select_runs = select_runs.where(runs.c.team_id == team_id)
    if only_run is not None:
        select_runs = select_runs.where(runs.c.id == only_run)
    if kind:
        select_runs = select_runs.where(runs.c.kind == kind)
    if status:
        select_runs = select_runs.where(runs.c.status == status)
    if name:
        select_runs = select_runs.where(runs.c.name.icontains(name, autoescape=True))
    if tag:
        select_runs = select_runs.where(
            runs.c.seq.in_(select(run_tags.c.run_seq).where(run_tags.c.tag == tag))
        )
    if group:
        select_runs = select_runs.where(runs.c.group_name == group)
    if project:
        select_runs = select_runs.where(runs.c.project == project)
    if query is not None:
        page = run_query.query_page(conn, select_runs, query, limit)
        return [{**_run(row), "sort_value": key, "values": values} for row, key, values in page]
    if before_seq is not None:
        select_runs = select_runs.where(runs.c.seq < before_seq)
    page_query = select_runs.order_by(runs.c.seq.desc()).limit(limit)
    return [cast(ListedRun, _run(row)) for row in conn.execute(page_query).mappings()]


def patch_run(conn: Connection, seq: int, changes: dict[str, Any], now: float) -> None:
    """Apply a PATCH: `summary` is merged key by key, `fill` sets fields where the run has
    none, the other fields replace. The run's row is locked first, so concurrent patches on two
    replicas apply one after the other (both summary merges land; tag rewrites do not
    collide)."""
    current = conn.execute(
        select(runs.c.summary).where(runs.c.seq == seq).with_for_update()
    ).scalar_one()
    if "fill" in changes:
        _fill(conn, seq, changes["fill"])
    values: dict[str, Any] = {"updated_at": now}
    if "summary" in changes:
        merged = {**orjson.loads(current), **changes["summary"]}
        values["summary"] = dump_json(merged, "summary")
    if "losses" in changes:
        values["losses"] = dump_json(changes["losses"], "losses")
    for field, column in (("description",) * 2, ("notes",) * 2, ("group", "group_name")):
        if field in changes:
            values[column] = changes[field]
    if "tags" in changes:
        tags = _unique(changes["tags"])
        values["tags"] = dump_json(tags, "tags")
        _set_tags(conn, seq, tags)
    if changes.get("step_metrics"):
        metrics.set_step_metrics(conn, seq, changes["step_metrics"])
    conn.execute(update(runs).where(runs.c.seq == seq).values(values))


# A column "has none" when it holds one of these: each fill is one conditional UPDATE, so two
# components filling at once can never both win.
_EMPTY_JSON = {"environments": "[]", "tags": "[]"}
_NULLABLE = ("name", "model", "framework", "description", "config", "training")


def _fill(conn: Connection, seq: int, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        if value is None or value == []:
            continue
        column = runs.c[name]
        if name == "error":
            where = [column.is_(None), runs.c.status == RUNNING]
        elif name in _EMPTY_JSON:
            where = [column == _EMPTY_JSON[name]]
        elif name in _NULLABLE:
            where = [column.is_(None)]
        else:
            raise bad_request("invalid_field", f"fill: {name} cannot be filled in")
        stored: dict[str, Any] = {name: value}
        if name == "tags":
            value = _unique(value)
        if name == "config":
            stored = config_columns(value, name)
        elif name in JSON_COLUMNS:
            stored = {name: dump_json(value, name)}
        done = conn.execute(update(runs).where(runs.c.seq == seq, *where).values(stored)).rowcount
        if done and name == "tags":
            _set_tags(conn, seq, value)


def finish_run(
    conn: Connection,
    seq: int,
    status: str,
    error: str | None,
    changes: dict[str, Any],
    now: float,
    times: dict[str, float] | None = None,
) -> bool:
    """
    Compare-and-set running (or crashed by the sweeper: its owner's word replaces the guess)
    -> `status`, set by the owner. True when this call finished the run, False when it already
    had this status from its owner (nothing changes); 409 when it has another terminal status.
    `times` may give the run's own finished_at and last_heartbeat_at (a run uploaded later),
    kept between its creation and now.
    """
    values: dict[str, Any] = {
        "status": str(status),
        "error": error,
        "finished_at": now,
        "status_by": OWNER,
    }
    created = conn.execute(select(runs.c.created_at).where(runs.c.seq == seq)).scalar_one()
    for name, value in (times or {}).items():
        values[name] = min(now, max(created, value))
    done = conn.execute(
        update(runs).where(runs.c.seq == seq, _OPEN_TO_OWNER).values(**values, updated_at=now)
    ).rowcount
    if done:
        _record_status(conn, seq, str(status), OWNER, now)
        if changes:
            patch_run(conn, seq, changes, now)
        return True
    current = conn.execute(select(runs.c.status).where(runs.c.seq == seq)).scalar_one()
    if current == status:
        return False
    raise conflict("run_finished", f"the run is already {current}; it cannot become {status}")


def request_stop(conn: Connection, seq: int, now: float) -> bool:
    """Ask a running run to stop (the first request's time is kept); False when it is not
    running. The W&B wire answers it to the SDK, which stops its script (issue 19)."""
    done = conn.execute(
        update(runs)
        .where(runs.c.seq == seq, runs.c.status == RUNNING, runs.c.stop_requested_at.is_(None))
        .values(stop_requested_at=now, updated_at=now)
    ).rowcount
    if done:
        return True
    status = conn.execute(select(runs.c.status).where(runs.c.seq == seq)).scalar_one()
    return bool(status == RUNNING)


def heartbeat(conn: Connection, seq: int, now: float) -> str:
    """Record a heartbeat of a running run; returns the run's status either way. The owner's
    heartbeat makes a run the sweeper crashed running again: it was not dead."""
    revived = conn.execute(
        update(runs)
        .where(runs.c.seq == seq, runs.c.status == CRASHED, runs.c.status_by == SWEEPER)
        .values(status=RUNNING, error=None, finished_at=None, status_by=OWNER, updated_at=now)
    ).rowcount
    if revived:
        _record_status(conn, seq, RUNNING, OWNER, now)
    conn.execute(
        update(runs)
        .where(runs.c.seq == seq, runs.c.status == RUNNING)
        .values(last_heartbeat_at=now)
    )
    status: str = conn.execute(select(runs.c.status).where(runs.c.seq == seq)).scalar_one()
    return status


def is_swept(run: Mapping[str, Any]) -> bool:
    """Whether `run` is crashed by the sweeper's guess only (still open to its owner)."""
    return run["status"] == CRASHED and run.get("status_by") == SWEEPER


def _record_status(conn: Connection, seq: int, status: str, by: str, now: float) -> None:
    """Append a change of status to the run's history (its row is locked by the caller's
    update), and mark the run changed for the alert evaluator."""
    history = conn.execute(select(runs.c.status_history).where(runs.c.seq == seq)).scalar_one()
    changes = [*orjson.loads(history or "[]"), {"status": status, "by": by, "at": now}]
    conn.execute(
        update(runs).where(runs.c.seq == seq).values(status_history=dump_json(changes, "history"))
    )
    alerts.touch(conn, seq, now, data=False)  # failed / crashed rules read it


def stale_error(
    run: Mapping[str, Any], now: float, timeout: float, listening_since: float = 0.0
) -> str | None:
    """
    The crash message when `run` is running and silent past `timeout`, else None. Silence
    counts from `listening_since` at the earliest (when this server started): heartbeats sent
    while the server was down are not the run's fault.
    """
    if run["status"] != RUNNING:
        return None
    last = max(run["last_heartbeat_at"] or run["created_at"], listening_since)
    if now - last <= timeout:
        return None
    return (
        f"no heartbeat for {int(now - last)} s: "
        "the process that owned the run stopped without closing it"
    )


def crash_stale(
    conn: Connection,
    now: float,
    timeout: float,
    seq: int | None = None,
    listening_since: float = 0.0,
) -> int:
    """
    Mark running runs silent past `timeout` as crashed (one run, or all); returns how many this
    call crashed. Safe on every replica at once: the candidate rows are locked, skipping those
    another sweep holds (PostgreSQL), and the update is a compare-and-set from running, so a
    run is crashed exactly once. Silence counts from `listening_since` at the earliest.
    """
    query = (
        select(runs.c.seq, runs.c.status, runs.c.created_at, runs.c.last_heartbeat_at)
        .where(runs.c.status == RUNNING)
        .with_for_update(skip_locked=True)
    )
    if seq is not None:
        query = query.where(runs.c.seq == seq)
    crashed = 0
    for row in conn.execute(query).mappings().all():
        message = stale_error(dict(row), now, timeout, listening_since)
        if message is None:
            continue
        done = conn.execute(
            update(runs)
            .where(runs.c.seq == row["seq"], runs.c.status == RUNNING)
            .values(
                status=CRASHED, error=message, finished_at=now, updated_at=now, status_by=SWEEPER
            )
        ).rowcount
        if done:
            _record_status(conn, row["seq"], CRASHED, SWEEPER, now)
        crashed += done
    return crashed


def _set_tags(conn: Connection, seq: int, tags: list[str]) -> None:
    conn.execute(delete(run_tags).where(run_tags.c.run_seq == seq))
    if tags:
        conn.execute(insert(run_tags), [{"run_seq": seq, "tag": t} for t in tags])


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _json_or_null(value: Any, field: str) -> str | None:
    return None if value is None else dump_json(value, field)


def require_running_or_grace(run: RunRow, now: float, grace: float) -> None:
    """409 for an upload to a run finished longer than `grace` seconds ago by its owner (one
    the sweeper crashed takes its owner's late data: sync after an outage, issue 20)."""
    finished = run["finished_at"]
    if is_swept(run):
        return
    if run["status"] != RUNNING and finished is not None and now - finished > grace:
        raise ApiError(
            409,
            "run_finished",
            f"the run is {run['status']} (finished {int(now - finished)} s ago); "
            f"uploads are accepted until {grace:g} s after a run finishes",
        )
