"""
Alerts a run sends itself: `run.alert(title, text, level)`, and the SDK's report that a metric
value was NaN or infinite (it drops such values, so the server never sees them otherwise).
They ride the run's metrics lane as the `alerts` stream, one NDJSON line each:

    {"type": "alert", "title": "eval regressed", "text": "...", "level": "warn", "ts": ...}
    {"type": "nonfinite", "metric": "loss", "value": "nan", "step": 812, "ts": ...}

An upload is stored once (its receipt, like annotations). An alert goes to the webhook of
every enabled rule whose scope holds the run (its team's, its project's), once per URL; a
non-finite value starts the `nonfinite` rules naming that metric (or "*"), once per run and
metric.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..admission import ingest_owner
from ..body import iter_objects
from ..errors import ApiError, bad_request
from ..ingest import receive
from ..state import ServerState
from ..store import alerts
from ..store.alerts import Transition
from ..store.rows import RunRow
from ..store.runs import require_running_or_grace
from .evaluator import run_block

__all__ = ["LEVELS", "parse_run_alerts", "upload_run_alerts"]

LEVELS = ("info", "warn", "error")
MAX_TITLE = 200
MAX_TEXT = 4000
MAX_METRIC = 256
NONFINITE = ("nan", "inf", "-inf")


async def upload_run_alerts(
    state: ServerState, request: Request, run: RunRow, key: str | None
) -> dict[str, Any]:
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    async with state.gate.admit(ingest_owner(request)) as ticket:
        upload = await receive(state, request, run, "alerts", key, ticket)
        if upload.prior is not None:
            return upload.prior
        rows = await run_in_threadpool(parse_run_alerts, upload.data)
        now = time.time()
        rules = [
            r
            for r in await state.store.read(alerts.enabled_rules, run["team_id"])
            if r["project"] is None or r["project"] == run["project"]
        ]
        block = run_block(state, run)
        events: list[tuple[str, dict[str, Any]]] = []
        transitions: list[Transition] = []
        for lineno, row in rows:
            if row["type"] == "alert":
                event = {**row, "condition": "run_alert", "run": block, "rule": None}
                events.append((f"alert/{run['seq']}/{upload.key}/{lineno}", event))
                continue
            for rule in rules:
                condition = rule["condition"]
                if condition["type"] != "nonfinite" or condition["metric"] not in (
                    "*",
                    row["metric"],
                ):
                    continue
                at = f" at step {row['step']}" if row["step"] is not None else ""
                event = {
                    "level": "error",
                    "title": f"{row['metric']} is {row['value']}",
                    "text": f"the run logged {row['value']} for {row['metric']}{at}",
                    "rule": {"id": rule["id"], "name": rule["name"]},
                    "condition": "nonfinite",
                    "subject": row["metric"],
                    "step": row["step"],
                    "run": block,
                    "at": row["ts"],
                }
                transitions.append(
                    Transition(rule["id"], rule["team_id"], run["seq"], row["metric"], True, event)
                )
        return await state.store.write(
            alerts.ingest_run_alerts,
            run,
            upload.key,
            upload.digest,
            rules,
            events,
            transitions,
            now,
        )


def parse_run_alerts(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of each line; 400 names the bad line."""
    rows = []
    now = time.time()
    for lineno, _, _, item in iter_objects(data):
        kind = item.get("type")
        ts = item.get("ts", now)
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise _bad(lineno, f"ts must be a number (epoch seconds), got {ts!r}")
        if kind == "alert":
            title, text, level = item.get("title"), item.get("text", ""), item.get("level", "info")
            if not isinstance(title, str) or not 0 < len(title) <= MAX_TITLE:
                raise _bad(lineno, f"title must be a string of 1 to {MAX_TITLE} characters")
            if not isinstance(text, str) or len(text) > MAX_TEXT:
                raise _bad(lineno, f"text must be a string of at most {MAX_TEXT} characters")
            if level not in LEVELS:
                raise _bad(lineno, f"level must be one of {', '.join(LEVELS)}, got {level!r}")
            rows.append(
                (lineno, {"type": kind, "title": title, "text": text, "level": level, "ts": ts})
            )
        elif kind == "nonfinite":
            metric, value, step = item.get("metric"), item.get("value"), item.get("step")
            if not isinstance(metric, str) or not 0 < len(metric) <= MAX_METRIC:
                raise _bad(lineno, f"metric must be a string of 1 to {MAX_METRIC} characters")
            if value not in NONFINITE:
                raise _bad(lineno, f"value must be one of {', '.join(NONFINITE)}, got {value!r}")
            if step is not None and (type(step) is not int or step < 0):
                raise _bad(lineno, f"step must be a non-negative integer or null, got {step!r}")
            rows.append(
                (lineno, {"type": kind, "metric": metric, "value": value, "step": step, "ts": ts})
            )
        else:
            raise _bad(lineno, f"type must be 'alert' or 'nonfinite', got {kind!r}")
    return rows


def _bad(lineno: int, message: str) -> ApiError:
    return bad_request("invalid_alert", f"line {lineno}: {message}")
