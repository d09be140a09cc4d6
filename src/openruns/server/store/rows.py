"""
The rows the store hands out, typed: what `run["seq"]` and `run["status"]` hold wherever the
server reads a run (issue 23).

A `RunRow` is the runs table's row as runs.py returns it (`_run`): every column, the JSON
ones decoded, `group_name` as `group`, without `config_values` (read by filters only). A
`ListedRun` is a run of `runs.list_runs` with a query: the row, its value of the sort key and
the query's columns. Only the shape is typed; the dicts are the ones the SQL built.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["ListedRun", "RunRow"]


class RunRow(TypedDict):
    seq: int  # the internal key: every other table names a run by it
    id: str  # the run id, unique within its team
    team_id: str
    create_key: str | None  # the Idempotency-Key of its create, if any
    kind: str  # "eval" | "train"
    name: str | None
    model: str | None
    environments: list[dict[str, Any]]  # spec.EnvironmentRef mappings
    framework: str | None
    description: str | None
    tags: list[str]
    config: dict[str, Any] | None  # spec.ConfigSource's mapping (a file kept as sent)
    training: dict[str, Any] | None
    status: str  # a spec.RunStatus value
    error: str | None
    summary: dict[str, Any]
    losses: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None
    last_heartbeat_at: float | None  # inf: never stale (a scheduler's run)
    notes: str | None
    group: str | None
    project: str
    stop_requested_at: float | None
    status_by: str | None  # owner | sweeper | None (never changed since creation)
    status_history: list[dict[str, Any]]


class ListedRun(RunRow, total=False):
    sort_value: Any  # the run's value of the query's sort key (its keyset cursor)
    values: dict[str, Any]  # the query's columns
