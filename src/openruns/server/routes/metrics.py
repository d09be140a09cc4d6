"""Metrics: upload NDJSON rows; read keys and series (downsampled or full)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request

from ...batches import BATCH_CONTENT_TYPE
from ..errors import bad_request
from ..handlers import JSON
from ..ingest import MAX_KEY_CHARS, upload_metrics
from ..models import (
    MetricKey,
    MetricKeyPage,
    MetricSeries,
    MetricsReceipt,
    RunsMetricKeys,
    RunsMetricSeries,
)
from ..store import key_pages, metric_key_ids, metric_reads
from ..store.key_pages import KeyOrder
from ..store.metrics import MAX_STEP, is_kind
from .deps import (
    Caller,
    State,
    decode_cursor,
    encode_cursor,
    listed,
    readable_run,
    writable_run,
)

__all__ = ["NDJSON_BODY", "UploadKey", "router"]

router = APIRouter(tags=["metrics"])

DEFAULT_KEYS_PAGE = 500
MAX_KEYS_PAGE = 5000
MAX_SERIES_KEYS = 500  # series of one read (each is up to max_points points, 4 numbers each)
MAX_RUNS_READ = 100  # runs of one read of several (the compare page's)
MAX_KEYS_UNPAGED = 10_000  # the one-list answer of 10,000 keys is about 1 MB
MAX_RUNS_KEYS = 50_000  # keys of one read of several runs' pages: 100 runs x the default page
_KEY_CURSORS: dict[str, tuple[tuple[type, ...], ...]] = {
    "name": ((str,),),
    "recent": ((int,), (str,)),
}

KeySearch = Annotated[
    str | None, Query(max_length=MAX_KEY_CHARS, description="keys containing this, any case")
]
KeyPrefix = Annotated[
    str | None, Query(max_length=MAX_KEY_CHARS, description="keys starting with this")
]
_ORDER_HELP = "name (default), or recent: the keys logged at the latest step first"
_BINARY = {"schema": {"type": "string", "format": "binary"}}
# NDJSON from any client; the SDK sends a batch (a zstd stream whose first frame, skipped by
# zstd, is the batch header), which reads as zstd-encoded NDJSON too.
NDJSON_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/x-ndjson": _BINARY, BATCH_CONTENT_TYPE: _BINARY},
    }
}
UploadKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=256,
        description=(
            "the upload's key (the SDK's batch key; default: sha256:<hex of the decompressed "
            "body>); a repeat answers the first receipt"
        ),
    ),
]


@router.post(
    "/runs/{run_id}/metrics",
    response_model=MetricsReceipt,
    openapi_extra=NDJSON_BODY,
    responses={409: {"description": "the run finished more than the grace period ago"}},
)
async def post_metrics(
    run_id: str, request: Request, state: State, caller: Caller, idempotency_key: UploadKey = None
) -> JSON:
    """
    NDJSON rows `{"step": int, "ts": float, "values": {"key": number}}`, with
    `Content-Encoding: zstd | gzip | identity` (the SDK's batches are zstd streams whose header
    frame zstd skips). Merged per (step, key): last write wins. A row with `"step": null` is
    keyed by its `ts` (required then), merged per (ts, key).
    """
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_metrics(state, request, run, idempotency_key))


@router.get("/runs/{run_id}/metrics/keys", response_model=MetricKeyPage | list[MetricKey])
async def metric_keys(
    run_id: str,
    state: State,
    caller: Caller,
    limit: Annotated[
        int | None, Query(ge=1, le=MAX_KEYS_PAGE, description="keys per page (default 500)")
    ] = None,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    q: KeySearch = None,
    prefix: KeyPrefix = None,
    order: Annotated[KeyOrder | None, Query(description=_ORDER_HELP)] = None,
) -> JSON:
    """
    A run's metric keys, one entry per key and axis (see MetricKey). With any of `limit`,
    `cursor`, `q`, `prefix` or `order`: one page `{items, next_cursor, total}` (pass
    `next_cursor` back as `cursor`, with the same filter and order). Without them: every entry
    in one list, as before paging, for a run of at most 10,000 keys (400 past that: page).
    """
    run = await readable_run(state, caller, run_id)
    if limit is None and cursor is None and q is None and prefix is None and order is None:
        keys = await state.store.read(key_pages.count_keys, run["seq"])
        if keys > MAX_KEYS_UNPAGED:
            raise bad_request(
                "too_many_keys",
                f"this run has {keys} metric keys, more than {MAX_KEYS_UNPAGED} in one answer: "
                "read them in pages (limit=, cursor=; q= or prefix= to search)",
            )
        return JSON(await state.store.read(metric_reads.key_stats, run["seq"]))
    order = order or "name"
    after = decode_cursor(cursor, _KEY_CURSORS[order])
    page = await state.store.read(
        key_pages.key_page, run["seq"], limit or DEFAULT_KEYS_PAGE, after, q, prefix, order
    )
    return JSON(_page(page))


@router.get("/metrics/keys", response_model=RunsMetricKeys)
async def runs_metric_keys(
    state: State,
    caller: Caller,
    runs: Annotated[str, Query(min_length=1, max_length=20_000, description="comma-separated")],
    limit: Annotated[
        int, Query(ge=1, le=MAX_KEYS_PAGE, description="keys per run (default 500)")
    ] = DEFAULT_KEYS_PAGE,
    q: KeySearch = None,
    prefix: KeyPrefix = None,
    order: Annotated[KeyOrder, Query(description=_ORDER_HELP)] = "name",
) -> JSON:
    """
    The first page of metric keys of several runs in one read, each run's as
    `/runs/{id}/metrics/keys` gives it with the same `limit`, `q`, `prefix` and `order` (the
    compare page: the keys of 20 runs in one request, not 20); a run's next pages are read
    from its own route with its `next_cursor`. At most 100 runs, and runs x `limit` at most
    50,000; a run the caller cannot read fails the read, naming it.
    """
    ids = listed(runs)
    if not ids:
        raise bad_request("empty_read", "name at least one run (runs=)")
    _check_run_count(ids)
    if len(ids) * limit > MAX_RUNS_KEYS:
        raise bad_request(
            "too_many_keys",
            f"{len(ids)} runs x limit={limit} is more than {MAX_RUNS_KEYS} keys in one answer: "
            "ask for fewer runs or a smaller limit",
        )
    seqs = [(await readable_run(state, caller, run_id))["seq"] for run_id in ids]
    pages = await state.store.read(key_pages.first_pages, seqs, limit, q, prefix, order)
    return JSON({"runs": {run_id: _page(page) for run_id, page in zip(ids, pages, strict=True)}})


@router.get("/runs/{run_id}/metrics", response_model=MetricSeries)
async def metric_series(
    run_id: str,
    state: State,
    caller: Caller,
    keys: Annotated[str | None, Query(max_length=100_000, description="comma-separated")] = None,
    step_min: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
    step_max: Annotated[int, Query(ge=0, le=MAX_STEP)] = MAX_STEP,
    max_points: Annotated[int, Query(ge=0, le=100_000, description="0: every point")] = 1000,
    ts_min: Annotated[float | None, Query(description="time-keyed rows from (epoch s)")] = None,
    ts_max: Annotated[float | None, Query(description="time-keyed rows up to (epoch s)")] = None,
    kind: Annotated[
        Literal["train", "eval"] | None,
        Query(description="eval: the keys under `eval/`; train: the others; default both"),
    ] = None,
) -> JSON:
    """
    Series by key: `series` by step, and `time` for the rows logged without a step (by
    timestamp), of at most 500 keys a request (400 past that: name them with `keys`, listed
    by `/metrics/keys`). With more points in range than `max_points`, a series is bucketed
    into at most `max_points` buckets (of steps, or of time), each giving its last point and
    the min and max of all its points, so spikes are never sampled away.
    """
    run = await readable_run(state, caller, run_id)
    names = listed(keys) if keys is not None else None
    if names is None and kind is None:
        count = await state.store.read(key_pages.count_keys, run["seq"])
        if count > MAX_SERIES_KEYS:
            raise _too_many_series(f"this run has {count} metric keys")
    if kind is not None:
        if names is None:
            known = await state.store.read(metric_key_ids.run_keys, run["seq"])
            names = [name for name, _ in known]
        names = [n for n in names if is_kind(n, kind)]
    if names is not None and len(names) > MAX_SERIES_KEYS:
        raise _too_many_series(f"{len(names)} keys were asked for")
    read = metric_reads.series_of_runs
    [answer] = await state.store.read(
        read, [run["seq"]], names, step_min, step_max, ts_min, ts_max, max_points
    )
    return JSON(answer)


@router.get("/metrics", response_model=RunsMetricSeries)
async def runs_metric_series(
    state: State,
    caller: Caller,
    runs: Annotated[str, Query(min_length=1, max_length=20_000, description="comma-separated")],
    keys: Annotated[str, Query(min_length=1, max_length=100_000, description="comma-separated")],
    step_min: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
    step_max: Annotated[int, Query(ge=0, le=MAX_STEP)] = MAX_STEP,
    max_points: Annotated[int, Query(ge=0, le=100_000, description="0: every point")] = 1000,
    ts_min: Annotated[float | None, Query(description="time-keyed rows from (epoch s)")] = None,
    ts_max: Annotated[float | None, Query(description="time-keyed rows up to (epoch s)")] = None,
) -> JSON:
    """
    The named keys of several runs in one read, each run's answer as `/runs/{id}/metrics`
    gives it (the compare page: 20 runs x 8 keys is one request, not 20). At most 100 runs and
    500 series (runs x keys) a read; a run the caller cannot read fails the read, naming it.
    """
    ids, names = listed(runs), listed(keys)
    if not ids or not names:
        raise bad_request("empty_read", "name at least one run (runs=) and one key (keys=)")
    _check_run_count(ids)
    if len(ids) * len(names) > MAX_SERIES_KEYS:
        raise _too_many_series(f"{len(ids)} runs x {len(names)} keys were asked for")
    seqs = [(await readable_run(state, caller, run_id))["seq"] for run_id in ids]
    answers = await state.store.read(
        metric_reads.series_of_runs, seqs, names, step_min, step_max, ts_min, ts_max, max_points
    )
    return JSON({"runs": dict(zip(ids, answers, strict=True))})


def _check_run_count(ids: list[str]) -> None:
    if len(ids) > MAX_RUNS_READ:
        raise bad_request(
            "too_many_runs", f"{len(ids)} runs were asked for; one read gives {MAX_RUNS_READ}"
        )


def _page(page: key_pages.KeyPage) -> dict[str, Any]:
    """A page of keys as the API answers it (its cursor encoded)."""
    next_cursor = encode_cursor(page.after) if page.after is not None else None
    return {"items": page.items, "next_cursor": next_cursor, "total": page.total}


def _too_many_series(what: str) -> Exception:
    return bad_request(
        "too_many_keys",
        f"{what}; one read gives the series of at most {MAX_SERIES_KEYS}: name them with "
        "keys= (a run's keys are listed, in pages, by /metrics/keys)",
    )
