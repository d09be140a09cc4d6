"""
The SQL of the Prime wire (server/prime/): functions over a Connection, called by Store inside
one transaction each, like the other modules here.

A Prime run is an ordinary row of `runs` (kind eval or train), written through runs.py, with
two differences made here: it is created with `last_heartbeat_at = NO_HEARTBEAT`, and its
closing follows the platform's rules (a status PUT on a closed run is 409; a finalize repeated
with the same outcome is a success). Everything else it has lives in the native tables (metric
points, episode segments, receipts) or in the two tables of migration 0003.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from sqlalchemy import Connection, select, update

from ...spec import RunStatus
from ..errors import conflict
from . import metrics, runs
from .receipts import get_receipt, put_receipt
from .rows import RunRow
from .schema import prime_environments, prime_objects
from .schema import runs as runs_table
from .sql import insert_ignore, lock_run

__all__ = [
    "NO_HEARTBEAT",
    "add_object",
    "claim_object",
    "close_run",
    "create_run",
    "environment_names",
    "ingest_metric_row",
    "list_objects",
    "put_upload_receipt",
    "resolve_environment",
    "update_run",
    "upload_receipt",
]

# The prime-runs SDK sends no heartbeats (a killed process leaves its run running on the
# platform too), so a Prime run must never be marked crashed for silence: an eval waiting ten
# minutes for its first rollout is not dead. A heartbeat "at infinity" makes runs.stale_error
# false for it without a column of its own; the API shows it as null (orjson writes inf as
# null), which is what it is: the run never sent a heartbeat.
NO_HEARTBEAT = math.inf
# The receipts kind of Prime uploads (a traces batch per run, a samples request): the answer
# a replay gets, including the line format a traces batch was stored under.
_UPLOADS = "prime_upload"
# The receipts kind of presigned PUTs, keyed by blob key: the SHA-256 and size of the first
# body written there (issue 25: a signed URL writes once, a written object never changes).
_OBJECTS = "prime_object"


def resolve_environment(
    conn: Connection, team_id: str, owner: str, name: str, now: float
) -> dict[str, Any]:
    """The team's environment `owner/name`, created on first use (the hub's get-or-create)."""
    conn.execute(
        insert_ignore(conn, prime_environments).values(
            id=f"env-{secrets.token_hex(8)}",
            team_id=team_id,
            owner=owner,
            name=name,
            created_at=now,
        )
    )
    row = (
        conn.execute(
            select(prime_environments).where(
                prime_environments.c.team_id == team_id,
                prime_environments.c.owner == owner,
                prime_environments.c.name == name,
            )
        )
        .mappings()
        .one()
    )
    return dict(row)


def environment_names(conn: Connection, team_id: str, ids: list[str]) -> dict[str, str]:
    """{environment id: name} for the ids this team's hub calls handed out."""
    if not ids:
        return {}
    query = select(prime_environments.c.id, prime_environments.c.name).where(
        prime_environments.c.team_id == team_id, prime_environments.c.id.in_(ids)
    )
    return {row[0]: row[1] for row in conn.execute(query)}


def create_run(conn: Connection, team_id: str, fields: dict[str, Any], now: float) -> RunRow:
    run, _ = runs.create_run(conn, team_id, fields, None, now)
    conn.execute(
        update(runs_table)
        .where(runs_table.c.seq == run["seq"])
        .values(last_heartbeat_at=NO_HEARTBEAT)
    )
    return {**run, "last_heartbeat_at": NO_HEARTBEAT}


def update_run(
    conn: Connection,
    seq: int,
    config: dict[str, Any] | None,
    summary: dict[str, Any] | None,
    now: float,
) -> None:
    """PUT /evaluations/{id} without a status: replace the config, merge the summary, whatever
    the run's status: only status changes are guarded (prime-runs closing an eval that was
    closed elsewhere still sends its metadata, issue 20)."""
    if config is not None:
        conn.execute(
            update(runs_table)
            .where(runs_table.c.seq == seq)
            .values(**runs.config_columns(config, "metadata"), updated_at=now)
        )
    if summary is not None:
        runs.patch_run(conn, seq, {"summary": summary}, now)


def close_run(
    conn: Connection,
    seq: int,
    status: str,
    error: str | None,
    summary: dict[str, Any] | None,
    now: float,
    *,
    repeat_ok: bool,
) -> bool:
    """
    Compare-and-set running -> `status` (with the summary merged). `repeat_ok`: a run already
    closed with this status is a success (finalize); otherwise any closed run is 409 (the
    status PUT, which the SDK reads as "already closed"). True when this call closed the run.
    """
    if not repeat_ok:
        _require_running(conn, seq)
    changes = {"summary": summary} if summary else {}
    return runs.finish_run(conn, seq, status, error, changes, now)


def _require_running(conn: Connection, seq: int) -> None:
    """409 unless the run is open to its owner (running, or crashed by the sweeper's guess)."""
    query = select(runs_table.c.status, runs_table.c.status_by).where(runs_table.c.seq == seq)
    row = conn.execute(query).mappings().one()
    if row["status"] != RunStatus.RUNNING and not runs.is_swept(dict(row)):
        raise conflict("run_closed", f"the run is already {row['status']}")


def ingest_metric_row(
    conn: Connection,
    run_seq: int,
    key: str,
    step: int | None,
    values: dict[str, float],
    ts: float | None,
    now: float,
) -> dict[str, Any]:
    """
    One /rft/metrics row into the run's metric points, unless `key` (the row's digest) was
    stored already: a replay changes nothing, even after a later row rewrote the step. A row
    without a step is keyed by its time (`_timestamp`, else now), as on the native path:
    prime-rl's `inference/*` and `event_loop_lag/*` rows are never folded into a step (issue 20).
    """
    lock_run(conn, run_seq)  # replicas: one writer of a run's points and receipts at a time
    prior = get_receipt(conn, run_seq, "metrics", key)
    if prior is not None:
        return prior
    points = metrics.MetricPoints()
    if step is None:
        at = now if ts is None else ts
        points.by_time.update(((name, at), v) for name, v in values.items())
    else:
        points.update(((name, step), (v, ts)) for name, v in values.items())
    metrics.write_points(conn, run_seq, points)
    receipt = {"status": "success", "step": step, "values": len(values)}
    put_receipt(conn, run_seq, "metrics", key, receipt, now)
    return receipt


def add_object(
    conn: Connection,
    run_seq: int,
    kind: str,
    step: int | None,
    blob_key: str,
    nbytes: int,
    rows: int,
    receipt: tuple[str, dict[str, Any]] | None,
    now: float,
) -> bool:
    """
    Record a stored object (and the receipt of the upload that brought it, in the same
    transaction); False when it was recorded already (a replayed confirm).
    """
    if receipt is not None:
        put_upload_receipt(conn, run_seq, receipt[0], receipt[1], now)
    done = conn.execute(
        insert_ignore(conn, prime_objects).values(
            run_seq=run_seq,
            kind=kind,
            step=step,
            blob_key=blob_key,
            bytes=nbytes,
            rows=rows,
            created_at=now,
        )
    ).rowcount
    return bool(done)


def list_objects(
    conn: Connection, run_seq: int, kind: str, step: int | None = None
) -> list[dict[str, Any]]:
    """A run's objects of `kind` (of one step), in the order they were stored."""
    query = (
        select(prime_objects)
        .where(prime_objects.c.run_seq == run_seq, prime_objects.c.kind == kind)
        .order_by(prime_objects.c.id)
    )
    if step is not None:
        query = query.where(prime_objects.c.step == step)
    return [dict(row) for row in conn.execute(query).mappings()]


def upload_receipt(conn: Connection, run_seq: int, key: str) -> dict[str, Any] | None:
    return get_receipt(conn, run_seq, _UPLOADS, key)


def put_upload_receipt(
    conn: Connection, run_seq: int, key: str, receipt: dict[str, Any], now: float
) -> None:
    """Remember a Prime upload's answer (traces batch, samples request) for its replays."""
    lock_run(conn, run_seq)
    if get_receipt(conn, run_seq, _UPLOADS, key) is None:
        put_receipt(conn, run_seq, _UPLOADS, key, receipt, now)


def claim_object(
    conn: Connection, run_seq: int, blob_key: str, digest: str, nbytes: int, now: float
) -> dict[str, Any]:
    """
    The body `blob_key` stands for: the first claim's `{"sha256", "bytes"}`, made now if there
    is none. Under the run's lock, so of two concurrent PUTs to one key exactly one claims it;
    the caller writes the blob only when the claim that stands is for its own bytes.
    """
    lock_run(conn, run_seq)
    claim = get_receipt(conn, run_seq, _OBJECTS, blob_key)
    if claim is None:
        claim = {"sha256": digest, "bytes": nbytes}
        put_receipt(conn, run_seq, _OBJECTS, blob_key, claim, now)
    return claim
