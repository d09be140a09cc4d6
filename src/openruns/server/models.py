"""
The JSON shapes of the API, as pydantic models: request bodies (validated; unknown fields are
rejected so a typo is an error, not a silent no-op) and responses (for the OpenAPI document;
handlers build responses as plain dicts and serialize them with orjson).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from ..spec import MAX_CONFIG_SOURCE_BYTES, MAX_ERROR_CHARS
from .store.runs import RUN_ID_PATTERN

__all__ = [
    "AnnotationsPage",
    "AnnotationsReceipt",
    "EpisodeRow",
    "EpisodesPage",
    "EpisodesReceipt",
    "Health",
    "LogsPage",
    "LogsReceipt",
    "MetricKey",
    "MetricKeyPage",
    "MetricSeries",
    "MetricsReceipt",
    "RunCreate",
    "RunCreated",
    "RunFill",
    "RunFinish",
    "RunList",
    "RunOut",
    "RunPatch",
    "RunsMetricKeys",
    "RunsMetricSeries",
    "StepRow",
]

MAX_INT = 2**63 - 1

Tag = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
LongText = Annotated[str, StringConstraints(max_length=100_000)]
# A run's error: the SDK cuts one to this length with a marker (spec.cut_text).
ErrorText = Annotated[str, StringConstraints(max_length=MAX_ERROR_CHARS)]
TeamId = Annotated[str, StringConstraints(min_length=1, max_length=128)]
GroupName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
# A run's project (W&B's; issue 19): any printable name without "/" (it is a path segment of
# the W&B wire's URLs).
ProjectName = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^/\x00-\x1f]+$")
]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
# The values of spec.RunStatus, the one vocabulary (tests/server/test_models.py holds them
# equal), spelled out so a type checker can read them; a Literal keeps the OpenAPI enum and the
# validation messages plain strings.
Status = Literal["running", "completed", "failed", "cancelled", "crashed"]
Terminal = Literal["completed", "failed", "cancelled", "crashed"]
# Clocks differ between machines; a time this far ahead of the server's is still accepted.
CLOCK_SKEW = 300.0


def _not_in_the_future(value: float) -> float:
    if value > time.time() + CLOCK_SKEW:
        raise ValueError("the time is in the future (epoch seconds, by the server's clock)")
    return value


# A time of the run's own (epoch seconds), given by `openruns sync` for a run that happened
# before it was uploaded; it can only move that run's own times, never past the present.
PastTime = Annotated[float, Field(ge=0), AfterValidator(_not_in_the_future)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfigIn(_Body):
    format: Literal["toml", "json", "yaml", "text"]
    text: Annotated[str, StringConstraints(max_length=MAX_CONFIG_SOURCE_BYTES)]
    filename: ShortText | None = None


class Losses(BaseModel):
    # Extra counters are kept as sent: an SDK that reports a new kind of loss must still be
    # able to finish its run on an older server.
    model_config = ConfigDict(extra="allow")

    dropped_records: Count = 0
    failed_records: dict[ShortText, Count] = Field(default_factory=dict)


class RunCreate(_Body):
    # Checked by the route (400 naming the rule, store.runs.check_run_id), not by the model.
    id: str | None = Field(
        None,
        description="client-chosen id, unique within the team; a repeat returns that run",
        json_schema_extra={"pattern": RUN_ID_PATTERN},
    )
    kind: Literal["eval", "train"]
    name: ShortText | None = None
    model: ShortText | None = None
    environments: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    framework: ShortText | None = None
    description: LongText | None = None
    tags: list[Tag] = Field(default_factory=list, max_length=100)
    config: ConfigIn | None = None
    training: dict[str, Any] | None = None
    team_id: TeamId | None = None
    created_at: PastTime | None = Field(
        None, description="when the run started, for a run uploaded later (openruns sync)"
    )
    group: GroupName | None = Field(None, description="runs of one experiment (grouped by)")
    project: ProjectName | None = Field(None, description="the run's project; default `default`")
    resume: bool = Field(
        False,
        description="a process resuming the run with an explicit id: an existing run that "
        "ended is running again (its metadata kept); a missing one is created",
    )
    reuse_deleted_id: bool = Field(
        False,
        description="true: create the run even if a run with this id was deleted (without it, "
        "that id is a 409 `run_deleted` naming the deletion)",
    )
    heartbeat: bool = Field(
        True,
        description="false: the creator is a scheduler, not a process that heartbeats (`openruns "
        "runs create`); the run is never marked crashed for silence, and its creator finishes it",
    )


class RunFill(_Body):
    """Fields a process attached to the run sets where the run has none: its owner left them
    unset (name, model, ...), or no other component reported a fatal error yet."""

    name: ShortText | None = None
    model: ShortText | None = None
    environments: list[dict[str, Any]] | None = Field(None, max_length=1000)
    framework: ShortText | None = None
    description: LongText | None = None
    tags: list[Tag] | None = Field(None, max_length=100)
    config: ConfigIn | None = None
    training: dict[str, Any] | None = None
    error: ErrorText | None = Field(
        None, description="a component's fatal error, kept while the run is running"
    )


class RunPatch(_Body):
    summary: dict[str, Any] | None = Field(None, description="merged into the summary by key")
    tags: list[Tag] | None = Field(None, max_length=100)
    description: LongText | None = None
    losses: Losses | None = None
    fill: RunFill | None = Field(None, description="set each field only where the run has none")
    notes: LongText | None = Field(None, description="a reader's notes on the run; null clears")
    group: GroupName | None = Field(None, description="null clears")
    step_metrics: dict[MetricName, MetricName | None] | None = Field(
        None,
        max_length=10_000,
        description="{metric: the metric it is drawn against by default}; null: the step",
    )


class RunFinish(_Body):
    status: Terminal
    error: ErrorText | None = None
    summary: dict[str, Any] | None = None
    losses: Losses | None = None
    finished_at: PastTime | None = Field(
        None, description="when the run ended, for a run uploaded later (openruns sync)"
    )
    last_heartbeat_at: PastTime | None = Field(
        None, description="the run's last sign of life, for a run uploaded later"
    )


class StatusChange(BaseModel):
    status: Status
    by: Literal["owner", "sweeper"]
    at: float


class RunOut(BaseModel):
    id: str
    kind: str
    name: str | None
    model: str | None
    environments: list[dict[str, Any]]
    framework: str | None
    description: str | None
    tags: list[str]
    config: dict[str, Any] | None
    training: dict[str, Any] | None
    team_id: str
    status: Status
    status_by: Literal["owner", "sweeper"] | None = Field(
        description="who set the status: its owner (a finish), or the sweeper (crashed for "
        "silence: a guess its owner's late data and final status replace); null while it "
        "runs as created, and for runs closed before this was kept"
    )
    status_history: list[StatusChange] = Field(
        description="every change of status after creation, oldest first"
    )
    error: str | None
    summary: dict[str, Any]
    losses: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None
    last_heartbeat_at: float | None
    notes: str | None
    group: str | None
    project: str
    stop_requested_at: float | None = Field(
        description="when a stop was requested (POST /runs/{id}/stop); the W&B wire tells its SDK"
    )
    url: str


class RunCreated(RunOut):
    token: str = Field(description="per-run token: reads and writes this run only")


class RunListed(RunOut):
    values: dict[str, Any] | None = Field(
        None, description="the fields asked for with `columns`, by their text (issue 22)"
    )


class RunList(BaseModel):
    items: list[RunListed]
    next_cursor: str | None


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    encodings: list[str]
    heartbeat_timeout: float


class MetricsReceipt(BaseModel):
    status: Literal["committed"]
    rows: int
    receipt: str


class EpisodesReceipt(BaseModel):
    status: Literal["committed"]
    records: int
    receipt: str


class MetricKey(BaseModel):
    key: str
    label: str = Field(
        description="the name to show: the key, or `<key> (by time)` for the rows logged "
        "without a step of a key that also has step-keyed points"
    )
    axis: Literal["step", "time"] = Field(
        description="step: the key's step-keyed points; time: its rows logged without a step"
    )
    last_step: int | None
    last_ts: float | None
    last_value: float
    count: int
    step_metric: str | None = Field(
        None, description="the metric this one is drawn against by default (define_metric)"
    )


class MetricKeyPage(BaseModel):
    items: list[MetricKey] = Field(
        description="the entries of up to `limit` keys (a key logged both ways: two entries)"
    )
    next_cursor: str | None = Field(description="pass back as `cursor` for the next page")
    total: int = Field(description="how many keys of the run match `q` / `prefix`")


class RunsMetricKeys(BaseModel):
    runs: dict[str, MetricKeyPage] = Field(description="each run's first page of keys, by id")


class Series(BaseModel):
    step: list[int]
    value: list[float]
    min: list[float]
    max: list[float]


class TimeSeries(BaseModel):
    ts: list[float]
    value: list[float]
    min: list[float]
    max: list[float]


class MetricSeries(BaseModel):
    series: dict[str, Series]
    downsampled: bool
    time: dict[str, TimeSeries] = Field(
        description="the rows logged without a step, by time (never folded into a step)"
    )


class RunsMetricSeries(BaseModel):
    runs: dict[str, MetricSeries] = Field(description="each run's series, by run id")


class StepRow(BaseModel):
    step: int | None
    count: int
    scored: int = Field(description="records of this step with a reward")
    avg_reward: float | None = Field(
        description="mean reward of the scored records (an unscored one is left out; counted "
        "as 0, as verifiers and prime-runs do: avg_reward × scored / count)"
    )
    off_policy: int = Field(
        description="episodes of this step trained at another step than they were dispatched at"
    )


class EpisodeRow(BaseModel):
    id: str
    stream: str
    step: int | None = Field(description="the step the episode was dispatched at")
    reward: float | None
    env: str | None
    ok: bool | None
    tokens: int | None
    duration: float | None
    kind: str | None = Field(description="train | eval")
    subset: str | None = Field(description="the cohort it was logged as (all, effective)")
    trained_step: int | None = Field(description="the step it was trained at (annotations)")


class AnnotationsReceipt(BaseModel):
    status: Literal["committed"]
    annotations: int
    receipt: str


class AnnotationsPage(BaseModel):
    items: list[dict[str, Any]]
    next_cursor: str | None


class LogsReceipt(BaseModel):
    status: Literal["committed"]
    lines: int
    receipt: str


class LogLine(BaseModel):
    offset: int  # bytes of the run's output before this line: the keyset of pages
    ts: float
    stream: str
    source: str
    line: str


class LogTotals(BaseModel):
    lines: int  # received
    bytes: int
    dropped_lines: int  # dropped from the middle to keep the run within the server's bound
    dropped_bytes: int
    gap_offset: int | None  # where the dropped lines were


class LogsPage(BaseModel):
    items: list[LogLine]
    totals: LogTotals


class EpisodesPage(BaseModel):
    items: list[EpisodeRow]
    next_cursor: str | None
