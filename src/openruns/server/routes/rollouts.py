"""
Reading rollouts: full-text search, previews of records, reward distributions, step times.

    GET /runs/{id}/search?q=...            hits newest first, with highlighted snippets
    GET /runs/{id}/previews?ids=a,b        first user message, final answer, expected answer
    GET /runs/{id}/rewards?step=N          the rewards of one step (its histogram)
    GET /runs/{id}/rewards/quantiles       p10 / p50 / p90 of the rewards, per step
    GET /runs/{id}/timeline                (step, wall time) anchors for time axes

Previews and snippets are cut from the records themselves (the index rows do not hold text):
each call reads at most MAX_PREVIEWS / MAX_HITS records, each zstd frame once, and previews
are kept in a bounded cache (records never change once stored).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from ..errors import bad_request
from ..handlers import JSON
from ..models import EpisodeRow
from ..rollouts import Location, load_records, parse, record_preview, record_text, snippets
from ..rollouts import Query as SearchQuery
from ..state import ServerState
from ..store import rewards as rewards_sql
from ..store import search as search_sql
from ..store import timeline as timeline_sql
from ..store.metrics import MAX_STEP
from .deps import Caller, State, decode_cursor, encode_cursor, listed, readable_run

__all__ = ["MAX_HITS", "SearchHit", "Step", "Stream", "hits_page", "record_texts", "router"]

router = APIRouter(tags=["rollouts"])

Stream = Literal["episodes", "traces"]
Step = Annotated[int, Query(ge=-(2**63), le=MAX_STEP)]
MAX_PREVIEWS = 200
MAX_HITS = 100
PREVIEW_CACHE = 50_000


class Snippet(BaseModel):
    label: str
    text: str
    matches: list[list[int]]


class SearchHit(EpisodeRow):
    snippets: list[Snippet]


class SearchPage(BaseModel):
    items: list[SearchHit]
    next_cursor: str | None
    pending: int


class StepRewards(BaseModel):
    step: int
    values: list[float]
    missing: int
    truncated: bool


class RewardQuantiles(BaseModel):
    step: list[int]
    count: list[int]
    mean: list[float]
    p10: list[float]
    p50: list[float]
    p90: list[float]


class Timeline(BaseModel):
    step: list[int]
    ts: list[float]


@router.get("/runs/{run_id}/search", response_model=SearchPage)
async def search(
    run_id: str,
    state: State,
    caller: Caller,
    q: Annotated[str, Query(min_length=1, max_length=1000)],
    stream: Stream = "episodes",
    kind: Annotated[str | None, Query(max_length=64, description="train / eval work")] = None,
    step_min: Step | None = None,
    step_max: Step | None = None,
    env: Annotated[str | None, Query(max_length=1024)] = None,
    ok: bool | None = None,
    reward_min: float | None = None,
    reward_max: float | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_HITS)] = 20,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JSON:
    """
    Records whose text (messages, tool calls and results, errors, anything else they hold)
    has every word of `q`: words, "quoted phrases" and prefix* words, case-insensitive.
    Newest first, with up to three snippets per hit (offsets of the matches in `matches`).
    The index is built behind ingest: `pending` counts the run's records not searchable yet.
    """
    run = await readable_run(state, caller, run_id)
    query = SearchQuery.parse(q)
    if not query:
        raise bad_request("invalid_query", "q has no words to search for")
    after = decode_cursor(cursor, ((int,),))
    hits = await state.store.read(
        search_sql.search,
        run["seq"],
        query,
        stream=stream,
        kind=kind,
        step_min=step_min,
        step_max=step_max,
        env=env,
        ok=ok,
        reward_min=reward_min,
        reward_max=reward_max,
        limit=limit + 1,
        before_seq=after[0] if after else None,
    )
    hits, next_cursor = await hits_page(state, hits, limit, query)
    for hit in hits:
        del hit["run_seq"]
    progress = await state.store.read(search_sql.run_progress, run["seq"])
    return JSON({"items": hits, "next_cursor": next_cursor, **progress})


@router.get("/runs/{run_id}/previews", response_model=dict[str, dict[str, Any]])
async def previews(
    run_id: str,
    state: State,
    caller: Caller,
    ids: Annotated[str, Query(max_length=100_000, description="comma-separated record ids")],
) -> JSON:
    """
    {id: {"prompt", "reply", "answer", "turns"}} of up to 200 records: the first user message,
    the final assistant message, the expected answer (excerpts of 300 characters), and the
    number of assistant messages, each when the record has it. Unknown ids are left out.
    """
    run = await readable_run(state, caller, run_id)
    wanted = listed(ids)
    if len(wanted) > MAX_PREVIEWS:
        raise bad_request("too_many_ids", f"at most {MAX_PREVIEWS} ids per call")
    found = await state.store.read(search_sql.locations, run["seq"], wanted)
    return JSON(await run_in_threadpool(_previews, state, found))


@router.get("/runs/{run_id}/rewards", response_model=StepRewards)
async def rewards(
    run_id: str,
    state: State,
    caller: Caller,
    step: Step,
    stream: Stream = "episodes",
    by: Annotated[
        Literal["dispatched", "trained"],
        Query(description="a step is the one records were dispatched at, or trained at"),
    ] = "dispatched",
    kind: Annotated[Literal["train", "eval"] | None, Query(description="default: both")] = None,
    subset: Annotated[str | None, Query(max_length=32, description="a cohort")] = None,
) -> JSON:
    """The rewards of one step's records, ascending (at most 100,000), and how many of the
    step's records have none."""
    run = await readable_run(state, caller, run_id)
    found = await state.store.read(
        rewards_sql.step_rewards, run["seq"], stream, step, by=by, kind=kind, subset=subset
    )
    return JSON({"step": step, **found})


@router.get("/runs/{run_id}/rewards/quantiles", response_model=RewardQuantiles)
async def reward_quantiles(
    run_id: str,
    state: State,
    caller: Caller,
    stream: Stream = "episodes",
    step_min: Step | None = None,
    step_max: Step | None = None,
    max_points: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    kind: Annotated[Literal["train", "eval"] | None, Query(description="default: both")] = None,
) -> JSON:
    """Per step: count, mean, p10, p50 and p90 of its records' rewards (linear
    interpolation), of one kind of records when `kind` is given. With more steps than
    `max_points`, consecutive steps are pooled into at most that many buckets, each reported
    at its last step."""
    run = await readable_run(state, caller, run_id)
    return JSON(
        await state.store.read(
            rewards_sql.reward_quantiles, run["seq"], stream, step_min, step_max, max_points, kind
        )
    )


@router.get("/runs/{run_id}/timeline", response_model=Timeline)
async def timeline(
    run_id: str,
    state: State,
    caller: Caller,
    points: Annotated[int, Query(ge=2, le=2000)] = 200,
) -> JSON:
    """(step, wall time) anchors from the run's metric timestamps, ascending, at most
    `points`: a step's time is interpolated between them. Empty without timed metrics."""
    run = await readable_run(state, caller, run_id)
    return JSON(await state.store.read(timeline_sql.timeline, run["seq"], points))


# -- reading records ------------------------------------------------------------------------


async def hits_page(
    state: ServerState, hits: list[dict[str, Any]], limit: int, query: SearchQuery
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of search hits from the `limit + 1` asked for, and the cursor past it: each hit
    with the snippets of its record's text, `seq` dropped (its `run_seq` is the caller's)."""
    next_cursor = encode_cursor([hits[limit - 1]["seq"]]) if len(hits) > limit else None
    hits = hits[:limit]
    found = await state.store.read(search_sql.places, [h["seq"] for h in hits])
    texts = await run_in_threadpool(record_texts, state, [found.get(h["seq"]) for h in hits])
    for hit, text in zip(hits, texts, strict=True):
        del hit["seq"]
        hit["snippets"] = snippets(text, query)
    return hits, next_cursor


def _location(row: dict[str, Any]) -> Location:
    return Location.of(row)


def record_texts(
    state: ServerState, rows: list[dict[str, Any] | None]
) -> list[list[tuple[str, str]]]:
    present = [r for r in rows if r is not None]
    records = iter(load_records(state.blobs, [_location(r) for r in present]))
    return [record_text(parse(next(records))) if r is not None else [] for r in rows]


class _Cache:
    """A bounded LRU of previews, keyed by where the record is stored (unique per record)."""

    def __init__(self, size: int):
        self.size = size
        self.items: OrderedDict[tuple[str, int, int], dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> dict[str, Any] | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: tuple[str, int, int], value: dict[str, Any]) -> None:
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_previews_cache = _Cache(PREVIEW_CACHE)


def _previews(state: ServerState, found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    missing: list[tuple[str, tuple[str, int, int], dict[str, Any]]] = []
    for record_id, row in found.items():
        key = (row["blob_key"], row["frame_offset"], row["offset"])
        cached = _previews_cache.get(key)
        if cached is None:
            missing.append((record_id, key, row))
        else:
            out[record_id] = cached
    records = load_records(state.blobs, [_location(row) for _, _, row in missing])
    for (record_id, key, _), raw in zip(missing, records, strict=True):
        preview = record_preview(parse(raw))
        _previews_cache.put(key, preview)
        out[record_id] = preview
    return out
