"""
The alert evaluator: a task of the server's lifespan that checks the rules against what
changed.

    task = asyncio.create_task(follow(state))

Every `alert_interval` seconds a round claims the runs marked changed since the last round
(store/alerts.claim_changed: new metric points or episodes, a change of status), reads what
the rules of their teams need of them in one transaction (the run, its newest points of the
rules' metrics, its newest episodes' outcomes), and records each condition that started or
stopped holding (store/alerts.apply), which queues one delivery per start. Runs nothing
changed in are not read, so a round costs what arrived since the last one, not the number of
runs. Silence is the exception, since it holds because nothing arrives: one indexed query a
round finds the running runs whose data is older than the shortest silence rule.

Several replicas may run it: a change is claimed by one of them, and a condition's start is a
compare-and-set, so each start is delivered once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ApiError
from ..state import ServerState
from ..store import alerts
from ..store.alerts import Transition

__all__ = ["check", "evaluate_round", "follow"]

logger = logging.getLogger("openruns.server")

BATCH_RUNS = 1000
# The newest points read per metric: a window in minutes looks at most this far back.
MAX_POINTS = 1000

Check = tuple[str, bool, dict[str, Any] | None]  # (subject, holds, the event when it holds)


async def follow(state: ServerState) -> None:
    """Evaluate forever (until cancelled)."""
    while True:
        await asyncio.sleep(state.settings.alert_interval)
        try:
            await evaluate_round(state)
        except ApiError as exc:  # the database is busy or unreachable: the next round retries
            logger.warning("openruns: alert evaluation skipped: %s", exc.message)
        except Exception:
            logger.warning("openruns: alert evaluation failed; retrying", exc_info=True)


async def evaluate_round(state: ServerState, now: float | None = None) -> int:
    """One round; returns how many deliveries it queued."""
    now = time.time() if now is None else now
    store = state.store
    rules = await store.read(alerts.enabled_rules)
    queued = 0
    while True:
        # Claimed even without rules: a rule made later starts from what changes after it.
        seqs = await store.write(alerts.claim_changed, BATCH_RUNS)
        if seqs and rules:
            queued += await _evaluate_changed(state, rules, seqs, now)
        if len(seqs) < BATCH_RUNS:
            break
    silence = [r for r in rules if r["condition"]["type"] == "silent"]
    if silence:
        queued += await _evaluate_silence(state, silence, now)
    return queued


async def _evaluate_changed(
    state: ServerState, rules: list[dict[str, Any]], seqs: list[int], now: float
) -> int:
    by_team = _by_team(rules)
    metrics_of: dict[str, set[str]] = {}
    outcomes_of: dict[str, int] = {}
    for team, team_rules in by_team.items():
        for rule in team_rules:
            condition = rule["condition"]
            if condition["type"] == "threshold":
                metrics_of.setdefault(team, set()).add(condition["metric"])
            elif condition["type"] == "error_rate":
                outcomes_of[team] = max(outcomes_of.get(team, 0), condition["window_episodes"])
    store = state.store
    facts = await store.read(alerts.run_facts, seqs, metrics_of, MAX_POINTS, outcomes_of)
    states = await store.read(alerts.states_of, sorted(facts))
    transitions: list[Transition] = []
    for run in facts.values():
        run["listening_since"] = store.started_at
        for rule in by_team.get(run["team_id"], []):
            if not _in_scope(rule, run):
                continue
            for subject, holds, event in check(rule, run, now):
                firing, since = states.get((rule["id"], run["seq"], subject), (False, 0.0))
                if firing and rule["condition"]["type"] == "silent":
                    # Data arrived after the silence began: that silence is over, even if the
                    # run is silent again by the time this round looks (the next one fires).
                    holds = holds and (run["last_data_at"] or 0.0) <= since
                if holds != firing:
                    transitions.append(_transition(state, rule, run, subject, holds, event, now))
    if not transitions:
        return 0
    return await store.write(alerts.apply, transitions, now)


async def _evaluate_silence(state: ServerState, rules: list[dict[str, Any]], now: float) -> int:
    store = state.store
    shortest = min(r["condition"]["minutes"] for r in rules)
    teams = sorted({r["team_id"] for r in rules})
    silent = await store.read(alerts.silent_runs, teams, now - shortest * 60, store.started_at)
    if not silent:
        return 0
    states = await store.read(alerts.states_of, [run["seq"] for run in silent])
    by_team = _by_team(rules)
    transitions = []
    for run in silent:
        run["listening_since"] = store.started_at
        for rule in by_team.get(run["team_id"], []):
            if not _in_scope(rule, run) or states.get((rule["id"], run["seq"], ""), (False,))[0]:
                continue
            for subject, holds, event in check(rule, run, now):
                if holds:
                    transitions.append(_transition(state, rule, run, subject, True, event, now))
    if not transitions:
        return 0
    return await store.write(alerts.apply, transitions, now)


def _by_team(rules: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_team: dict[str, list[dict[str, Any]]] = {}
    for rule in rules:
        by_team.setdefault(rule["team_id"], []).append(rule)
    return by_team


def _in_scope(rule: dict[str, Any], run: dict[str, Any]) -> bool:
    return rule["project"] is None or rule["project"] == run["project"]


def _transition(
    state: ServerState,
    rule: dict[str, Any],
    run: dict[str, Any],
    subject: str,
    holds: bool,
    event: dict[str, Any] | None,
    now: float,
) -> Transition:
    full: dict[str, Any] = {}
    if holds and event is not None:
        full = {
            **event,
            "rule": {"id": rule["id"], "name": rule["name"]},
            "condition": rule["condition"]["type"],
            "subject": subject or None,
            "run": run_block(state, run),
            "at": now,
        }
    return Transition(rule["id"], rule["team_id"], run["seq"], subject, holds, full)


def run_block(state: ServerState, run: Mapping[str, Any]) -> dict[str, Any]:
    """What a delivery says of its run."""
    return {
        "id": run["id"],
        "name": run["name"],
        "project": run["project"],
        "team": run["team_id"],
        "status": run["status"],
        "url": state.run_url(run["id"]),
    }


# -- conditions (pure) ----------------------------------------------------------------------------


def check(rule: dict[str, Any], run: dict[str, Any], now: float) -> Iterator[Check]:
    """Whether the rule's condition holds for `run` (facts as store/alerts.run_facts reads
    them), per subject; nothing where the facts say nothing new (a metric without points)."""
    condition = rule["condition"]
    kind = condition["type"]
    if kind == "failed":
        holds = run["status"] in condition["statuses"]
        yield "", holds, _event("error", f"run {run['status']}", run.get("error") or "", holds)
    elif kind == "silent":
        last = max(run["last_data_at"] or run["created_at"], run.get("listening_since", 0.0))
        holds = run["status"] == "running" and now - last > condition["minutes"] * 60
        text = f"no metric points or episodes for {_duration(now - last)}"
        yield "", holds, _event("warn", "run silent", text, holds)
    elif kind == "threshold":
        yield from _threshold(condition, run, now)
    elif kind == "error_rate":
        outcomes = run["outcomes"][: condition["window_episodes"]]
        errors = outcomes.count(False)
        enough = len(outcomes) >= min(condition["min_episodes"], condition["window_episodes"])
        rate = errors / len(outcomes) if outcomes else 0.0
        holds = enough and rate > condition["above"]
        text = (
            f"{errors} of the newest {len(outcomes)} episodes failed "
            f"({rate:.0%}, above {condition['above']:.0%})"
        )
        yield "", holds, _event("warn", "episode error rate", text, holds)
    # nonfinite: fired when the SDK reports the value (run_alerts.py), never here


def _threshold(condition: dict[str, Any], run: dict[str, Any], now: float) -> Iterator[Check]:
    metric = condition["metric"]
    points = run["points"].get(metric)
    if not points:
        return
    if condition.get("window_minutes") is not None:
        since = now - condition["window_minutes"] * 60
        values = [v for v, ts in points if ts is not None and ts >= since]
        window = f"{_duration(condition['window_minutes'] * 60)}"
    else:
        values = [v for v, _ in points[: condition["window_points"]]]
        window = f"{len(values)} points"
    if not values:
        return
    stat = condition["stat"]
    value = {
        "mean": math.fsum(values) / len(values),
        "min": min(values),
        "max": max(values),
        "last": values[0],
    }[stat]
    above = condition["op"] == "above"
    holds = value > condition["value"] if above else value < condition["value"]
    title = f"{metric} {condition['op']} {condition['value']:g}"
    text = f"{stat} of the last {window}: {value:.6g}"
    event = _event("warn", title, text, holds)
    if event is not None:
        event["value"] = value
    yield metric, holds, event


def _event(level: str, title: str, text: str, holds: bool) -> dict[str, Any] | None:
    return {"level": level, "title": title, "text": text} if holds else None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
