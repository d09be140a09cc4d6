"""
Alerts' SQL (server/alerts/): rules, what changed per run, condition states, deliveries.

What changed: ingest marks a run (`touch`) in the transaction that stores its metric points or
episodes, and a change of status marks it too (runs._record_status). The evaluator claims the
marked runs (`claim_changed`, a compare-and-set from pending, so two replicas never evaluate
the same change twice, and a change made after the claim marks the run again) and reads only
those. Silence is the one condition that holds without a change: `silent_runs` reads the
running runs whose data is older than a cutoff, in one indexed query.

Dedupe: a condition fires when its state turns from not firing to firing (`apply`, a
compare-and-set per (rule, run, subject)), and each firing is one delivery whose `dedupe`
key is unique per rule, the last line of defence against a second replica.

Deliveries are claimed with a lease (`claim_deliveries`): a replica that stops while sending
leaves the row to be claimed again when its lease ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update

from ...spec import MAX_STEP
from . import metric_chunks
from .receipts import get_receipt, put_receipt
from .rows import RunRow
from .schema import (
    alert_activity,
    alert_deliveries,
    alert_rules,
    alert_states,
    episodes,
    metric_keys,
    metric_time_points,
    runs,
)
from .sql import insert_ignore, lock_run, upsert

__all__ = [
    "Transition",
    "apply",
    "claim_changed",
    "claim_deliveries",
    "create_rule",
    "delete_rule",
    "deliveries_page",
    "enabled_rules",
    "finish_delivery",
    "get_rule",
    "ingest_run_alerts",
    "list_rules",
    "queue_run_alerts",
    "recent_outcomes",
    "recent_points",
    "run_facts",
    "runs_by_seq",
    "silent_runs",
    "states_of",
    "touch",
    "update_rule",
]

_IN_CHUNK = 500
_RULE_COLUMNS = ("id", "team_id", "project", "name", "url", "format", "secret", "enabled")
_RUN_COLUMNS = (
    runs.c.seq,
    runs.c.id,
    runs.c.team_id,
    runs.c.project,
    runs.c.name,
    runs.c.status,
    runs.c.error,
    runs.c.created_at,
)


# -- rules --------------------------------------------------------------------------------------


def _rule(row: Any) -> dict[str, Any]:
    rule = {k: row[k] for k in _RULE_COLUMNS}
    rule["condition"] = orjson.loads(row["condition"])
    rule["enabled"] = bool(rule["enabled"])
    rule["created_at"] = row["created_at"]
    return rule


def create_rule(conn: Connection, fields: dict[str, Any], now: float) -> dict[str, Any]:
    """Store a rule: `fields` has team_id, project, name, condition (a dict), url, format,
    secret, enabled."""
    values = {**fields, "condition": orjson.dumps(fields["condition"]).decode(), "created_at": now}
    inserted = conn.execute(insert(alert_rules).values(**values)).inserted_primary_key
    assert inserted is not None
    rule = get_rule(conn, inserted[0], None)
    assert rule is not None
    return rule


def get_rule(conn: Connection, rule_id: int, team_id: str | None) -> dict[str, Any] | None:
    """Rule `rule_id` of `team_id` (None: of any team)."""
    query = select(alert_rules).where(alert_rules.c.id == rule_id)
    if team_id is not None:
        query = query.where(alert_rules.c.team_id == team_id)
    row = conn.execute(query).mappings().first()
    return _rule(row) if row is not None else None


def list_rules(conn: Connection, team_id: str | None) -> list[dict[str, Any]]:
    query = select(alert_rules).order_by(alert_rules.c.id)
    if team_id is not None:
        query = query.where(alert_rules.c.team_id == team_id)
    return [_rule(row) for row in conn.execute(query).mappings()]


def enabled_rules(conn: Connection, team_id: str | None = None) -> list[dict[str, Any]]:
    """The enabled rules of `team_id` (None: of every team)."""
    query = select(alert_rules).where(alert_rules.c.enabled.is_(True)).order_by(alert_rules.c.id)
    if team_id is not None:
        query = query.where(alert_rules.c.team_id == team_id)
    return [_rule(row) for row in conn.execute(query).mappings()]


def update_rule(conn: Connection, rule_id: int, changes: dict[str, Any]) -> None:
    values = dict(changes)
    if "condition" in values:
        values["condition"] = orjson.dumps(values["condition"]).decode()
        # A new condition starts over: what the old one held says nothing of the new one.
        conn.execute(delete(alert_states).where(alert_states.c.rule_id == rule_id))
    if values:
        conn.execute(update(alert_rules).where(alert_rules.c.id == rule_id).values(**values))


def delete_rule(conn: Connection, rule_id: int, now: float) -> None:
    """Delete a rule and its states; its deliveries stay in the log, those not yet sent marked
    failed."""
    conn.execute(delete(alert_rules).where(alert_rules.c.id == rule_id))
    conn.execute(delete(alert_states).where(alert_states.c.rule_id == rule_id))
    conn.execute(
        update(alert_deliveries)
        .where(alert_deliveries.c.rule_id == rule_id, alert_deliveries.c.status == "pending")
        .values(status="failed", last_error="the rule was deleted", next_at=now)
    )


# -- what changed -------------------------------------------------------------------------------


def touch(conn: Connection, run_seq: int, now: float, data: bool) -> None:
    """Mark the run changed (for the evaluator); `data`: metric points or episodes arrived now
    (silence is counted from the last one). One statement, in the writer's transaction."""
    row = {"run_seq": run_seq, "last_data_at": now if data else None, "pending": True}
    if data:
        conn.execute(upsert(conn, alert_activity, ("run_seq",), ("last_data_at", "pending")), row)
    else:
        conn.execute(upsert(conn, alert_activity, ("run_seq",), ("pending",)), row)


def claim_changed(conn: Connection, limit: int) -> list[int]:
    """Up to `limit` runs marked changed, unmarked now: this caller evaluates them."""
    # SKIP LOCKED (PostgreSQL): rows another replica is claiming are left to it, not waited on.
    marked = (
        select(alert_activity.c.run_seq)
        .where(alert_activity.c.pending.is_(True))
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    seqs = [seq for (seq,) in conn.execute(marked)]
    if not seqs:
        return []
    # A compare-and-set: a replica claiming the same rows at once waits for this transaction
    # (PostgreSQL re-reads `pending` after the lock) and claims none of them.
    claimed = conn.execute(
        update(alert_activity)
        .where(alert_activity.c.run_seq.in_(seqs), alert_activity.c.pending.is_(True))
        .values(pending=False)
        .returning(alert_activity.c.run_seq)
    )
    return sorted(seq for (seq,) in claimed)


def runs_by_seq(conn: Connection, seqs: list[int]) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for i in range(0, len(seqs), _IN_CHUNK):
        query = select(*_RUN_COLUMNS).where(runs.c.seq.in_(seqs[i : i + _IN_CHUNK]))
        found.update((row["seq"], dict(row)) for row in conn.execute(query).mappings())
    return found


def run_facts(
    conn: Connection,
    seqs: list[int],
    metrics_of: dict[str, set[str]],
    points: int,
    outcomes_of: dict[str, int],
) -> dict[int, dict[str, Any]]:
    """What the rules read of each run, in one transaction: the run's row with `last_data_at`,
    `points` ({metric: newest points}, of the metrics `metrics_of` names for the run's team)
    and `outcomes` (the ok of its newest `outcomes_of[team]` episodes)."""
    facts = runs_by_seq(conn, seqs)
    for i in range(0, len(seqs), _IN_CHUNK):
        last = select(alert_activity.c.run_seq, alert_activity.c.last_data_at).where(
            alert_activity.c.run_seq.in_(seqs[i : i + _IN_CHUNK])
        )
        for seq, at in conn.execute(last):
            if seq in facts:
                facts[seq]["last_data_at"] = at
    for seq, run in facts.items():
        run.setdefault("last_data_at", None)
        names = metrics_of.get(run["team_id"])
        run["points"] = recent_points(conn, seq, names, points) if names else {}
        window = outcomes_of.get(run["team_id"])
        run["outcomes"] = recent_outcomes(conn, seq, window) if window else []
    return facts


def silent_runs(
    conn: Connection, teams: list[str], cutoff: float, listening_since: float
) -> list[dict[str, Any]]:
    """The running runs of `teams` whose last data (else their creation, else when this server
    started listening, whichever is latest) is before `cutoff`, each with `last_data_at`."""
    if listening_since >= cutoff:
        return []
    last = func.coalesce(alert_activity.c.last_data_at, runs.c.created_at)
    query = (
        select(*_RUN_COLUMNS, last.label("last_data_at"))
        .select_from(runs.outerjoin(alert_activity, alert_activity.c.run_seq == runs.c.seq))
        .where(runs.c.status == "running", runs.c.team_id.in_(teams), last < cutoff)
    )
    return [dict(row) for row in conn.execute(query).mappings()]


def recent_points(
    conn: Connection, run_seq: int, names: Iterable[str], limit: int
) -> dict[str, list[tuple[float, float | None]]]:
    """{metric: [(value, ts), ...]}: the newest `limit` points of each metric of the run among
    `names`, newest first (by step; a metric logged without steps, by time)."""
    wanted = sorted(set(names))
    out: dict[str, list[tuple[float, float | None]]] = {}
    if not wanted:
        return out
    keys = select(metric_keys.c.name, metric_keys.c.id).where(
        metric_keys.c.run_seq == run_seq, metric_keys.c.name.in_(wanted)
    )
    for name, key_id in conn.execute(keys).all():
        points: list[Any] = [
            (value, ts)
            for _, value, ts in metric_chunks.read(
                conn, key_id, 0, MAX_STEP, limit, descending=True
            )
        ]
        if not points:
            points = list(
                conn.execute(
                    select(metric_time_points.c.value, metric_time_points.c.ts)
                    .where(metric_time_points.c.key_id == key_id)
                    .order_by(metric_time_points.c.ts.desc())
                    .limit(limit)
                ).all()
            )
        out[name] = [(value, ts) for value, ts in points]
    return out


def recent_outcomes(conn: Connection, run_seq: int, limit: int) -> list[bool]:
    """The `ok` of the run's newest `limit` episodes that say (by step, then arrival)."""
    e = episodes
    query = (
        select(e.c.ok)
        .where(e.c.run_seq == run_seq, e.c.stream == "episodes", e.c.ok.is_not(None))
        .order_by(e.c.step.desc(), e.c.seq.desc())
        .limit(limit)
    )
    return [bool(ok) for (ok,) in conn.execute(query)]


# -- condition states -----------------------------------------------------------------------------


def states_of(
    conn: Connection, run_seqs: list[int]
) -> dict[tuple[int, int, str], tuple[bool, float]]:
    """{(rule, run, subject): (firing, when that last changed)} of the runs' states."""
    found: dict[tuple[int, int, str], tuple[bool, float]] = {}
    s = alert_states
    for i in range(0, len(run_seqs), _IN_CHUNK):
        query = select(s.c.rule_id, s.c.run_seq, s.c.subject, s.c.firing, s.c.changed_at).where(
            s.c.run_seq.in_(run_seqs[i : i + _IN_CHUNK])
        )
        found.update(((r, run, subj), (bool(f), at)) for r, run, subj, f, at in conn.execute(query))
    return found


@dataclass(frozen=True)
class Transition:
    """A condition of a rule that started (`firing`) or stopped holding for a run; `event`:
    what the delivery carries when it starts."""

    rule_id: int
    team_id: str
    run_seq: int
    subject: str
    firing: bool
    event: dict[str, Any]


def apply(conn: Connection, transitions: list[Transition], now: float) -> int:
    """Record each transition, and queue a delivery for each condition that started holding
    by this call (not by another replica's); returns how many were queued."""
    s = alert_states
    queued = 0
    for t in transitions:
        where = and_(s.c.rule_id == t.rule_id, s.c.run_seq == t.run_seq, s.c.subject == t.subject)
        if not t.firing:
            conn.execute(
                update(s).where(where, s.c.firing.is_(True)).values(firing=False, changed_at=now)
            )
            continue
        conn.execute(
            insert_ignore(conn, s).values(
                rule_id=t.rule_id,
                run_seq=t.run_seq,
                subject=t.subject,
                firing=False,
                episode=0,
                changed_at=now,
            )
        )
        started = conn.execute(
            update(s)
            .where(where, s.c.firing.is_(False))
            .values(firing=True, episode=s.c.episode + 1, changed_at=now)
            .returning(s.c.episode)
        ).first()
        if started is None:
            continue  # firing already (here or on another replica)
        dedupe = f"{t.run_seq}/{t.subject}/{started[0]}"
        queued += _queue(conn, t.rule_id, t.team_id, t.run_seq, dedupe, t.event, now)
    return queued


def _queue(
    conn: Connection,
    rule_id: int,
    team_id: str,
    run_seq: int | None,
    dedupe: str,
    event: dict[str, Any],
    now: float,
) -> int:
    inserted = conn.execute(
        insert_ignore(conn, alert_deliveries).values(
            rule_id=rule_id,
            team_id=team_id,
            run_seq=run_seq,
            dedupe=dedupe,
            event=orjson.dumps(event).decode(),
            status="pending",
            attempts=0,
            next_at=now,
            created_at=now,
        )
    ).rowcount
    return int(inserted)


def queue_run_alerts(
    conn: Connection,
    rules: list[dict[str, Any]],
    run: RunRow,
    events: list[tuple[str, dict[str, Any]]],
    now: float,
) -> int:
    """Queue alerts a run sent (events with their dedupe keys) to the webhook of each rule in
    `rules` (one rule per URL); returns how many deliveries were queued."""
    by_url: dict[str, dict[str, Any]] = {}
    for rule in rules:
        by_url.setdefault(rule["url"], rule)
    queued = 0
    for rule in by_url.values():
        for dedupe, event in events:
            queued += _queue(conn, rule["id"], run["team_id"], run["seq"], dedupe, event, now)
    return queued


def ingest_run_alerts(
    conn: Connection,
    run: RunRow,
    key: str,
    digest: str | None,
    rules: list[dict[str, Any]],
    events: list[tuple[str, dict[str, Any]]],
    transitions: list[Transition],
    now: float,
) -> dict[str, Any]:
    """An upload of alerts a run sent, with its receipt, unless `key` was stored already:
    `events` (run.alert) queued to the webhooks of `rules`, `transitions` (a NaN reported)
    applied."""
    lock_run(conn, run["seq"])
    prior = get_receipt(conn, run["seq"], "alerts", key, digest)
    if prior is not None:
        return prior
    queued = queue_run_alerts(conn, rules, run, events, now) if rules else 0
    queued += apply(conn, transitions, now)
    receipt = {
        "status": "committed",
        "alerts": len(events) + len(transitions),
        "deliveries": queued,
        "receipt": key,
    }
    put_receipt(conn, run["seq"], "alerts", key, receipt, now, digest)
    return receipt


# -- deliveries ---------------------------------------------------------------------------------


def claim_deliveries(
    conn: Connection, now: float, lease: float, limit: int
) -> list[dict[str, Any]]:
    """Up to `limit` deliveries due now, leased to this caller until now + `lease` (their
    attempt counted), each with its rule's url, format and secret."""
    d = alert_deliveries
    free = or_(d.c.claimed_until.is_(None), d.c.claimed_until < now)
    due = (
        select(d.c.id)
        .where(d.c.status == "pending", d.c.next_at <= now, free)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    ids = [i for (i,) in conn.execute(due)]
    if not ids:
        return []
    claimed = conn.execute(
        update(d)
        .where(d.c.id.in_(ids), d.c.status == "pending", free)
        .values(claimed_until=now + lease, attempts=d.c.attempts + 1)
        .returning(d.c.id, d.c.rule_id, d.c.event, d.c.attempts, d.c.created_at)
    ).all()
    rule_ids = sorted({row.rule_id for row in claimed})
    rules = {
        row.id: row
        for row in conn.execute(
            select(
                alert_rules.c.id, alert_rules.c.url, alert_rules.c.format, alert_rules.c.secret
            ).where(alert_rules.c.id.in_(rule_ids))
        )
    }
    out = []
    for row in claimed:
        rule = rules.get(row.rule_id)
        if rule is None:  # deleted meanwhile
            continue
        out.append(
            {
                "id": row.id,
                "event": orjson.loads(row.event),
                "attempts": row.attempts,
                "url": rule.url,
                "format": rule.format,
                "secret": rule.secret,
            }
        )
    return out


def finish_delivery(
    conn: Connection,
    delivery_id: int,
    status: str,
    response_status: int | None,
    error: str | None,
    next_at: float,
    now: float,
) -> None:
    """Record an attempt: `status` delivered, failed (no more attempts), or pending (retried at
    `next_at`); the lease ends."""
    values: dict[str, Any] = {
        "status": status,
        "response_status": response_status,
        "last_error": error,
        "next_at": next_at,
        "claimed_until": None,
    }
    if status == "delivered":
        values["delivered_at"] = now
    conn.execute(
        update(alert_deliveries).where(alert_deliveries.c.id == delivery_id).values(values)
    )


def deliveries_page(
    conn: Connection,
    team_id: str | None,
    before_id: int | None,
    limit: int,
    rule_id: int | None = None,
    status: str | None = None,
    run_id: str | None = None,
) -> list[dict[str, Any]]:
    """The delivery log, newest first, with each delivery's run id and rule name."""
    d = alert_deliveries
    query = (
        select(
            d.c.id,
            d.c.rule_id,
            alert_rules.c.name.label("rule_name"),
            runs.c.id.label("run_id"),
            d.c.event,
            d.c.status,
            d.c.attempts,
            d.c.response_status,
            d.c.last_error,
            d.c.created_at,
            d.c.delivered_at,
            d.c.next_at,
        )
        .select_from(
            d.outerjoin(alert_rules, alert_rules.c.id == d.c.rule_id).outerjoin(
                runs, runs.c.seq == d.c.run_seq
            )
        )
        .order_by(d.c.id.desc())
        .limit(limit)
    )
    if team_id is not None:
        query = query.where(d.c.team_id == team_id)
    if before_id is not None:
        query = query.where(d.c.id < before_id)
    if rule_id is not None:
        query = query.where(d.c.rule_id == rule_id)
    if status is not None:
        query = query.where(d.c.status == status)
    if run_id is not None:
        query = query.where(runs.c.id == run_id)
    out = []
    for row in conn.execute(query).mappings():
        item = dict(row)
        item["event"] = orjson.loads(item["event"])
        if item["status"] != "pending":
            item["next_at"] = None
        out.append(item)
    return out
