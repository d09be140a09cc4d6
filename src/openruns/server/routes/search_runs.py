"""
Full-text search over the episodes of many runs (issue 22):

    GET /search?q=...&project=&group=&filter=   hits newest first, each naming its run

The runs searched are those a runs listing with the same project, group and filter answers
(the filter language of GET /runs), at most MAX_SEARCH_RUNS of them: a wider scope is a 400
asking for a narrower one, so one search stays one bounded index query (the runs are index
tokens on SQLite, an IN list on PostgreSQL). Hits are the per-run search's, with the same
page bound (MAX_HITS) and snippets, plus `run` ({id, name}).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from ..errors import bad_request
from ..handlers import JSON
from ..queries.language import MAX_FILTER_CHARS, FilterError, parse_filter
from ..rollouts import Query as SearchQuery
from ..store import search as search_store
from ..store.run_query import RunQuery
from .deps import Caller, State, decode_cursor
from .rollouts import MAX_HITS, SearchHit, Step, Stream, hits_page

__all__ = ["MAX_SEARCH_RUNS", "router"]

router = APIRouter(tags=["rollouts"])

MAX_SEARCH_RUNS = 1000


class RunName(BaseModel):
    id: str
    name: str | None


class RunsSearchHit(SearchHit):
    run: RunName


class RunsSearchPage(BaseModel):
    items: list[RunsSearchHit]
    next_cursor: str | None
    runs: int
    pending: int


@router.get("/search", response_model=RunsSearchPage)
async def search_runs(
    state: State,
    caller: Caller,
    q: Annotated[str, Query(min_length=1, max_length=1000)],
    project: Annotated[str | None, Query(max_length=256)] = None,
    group: Annotated[str | None, Query(max_length=256)] = None,
    filter: Annotated[
        str | None,
        Query(max_length=MAX_FILTER_CHARS, description="the runs to search, as GET /runs takes"),
    ] = None,
    stream: Stream = "episodes",
    kind: Annotated[str | None, Query(max_length=64, description="train / eval work")] = None,
    step_min: Step | None = None,
    step_max: Step | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_HITS)] = 20,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JSON:
    """
    Records of the chosen runs whose text has every word of `q` (as the per-run search:
    words, "quoted phrases", prefix* words), newest first, each hit naming its run. `runs`
    says how many runs were searched; `pending` counts their records not searchable yet.
    """
    query = SearchQuery.parse(q)
    if not query:
        raise bad_request("invalid_query", "q has no words to search for")
    try:
        where = parse_filter(filter) if filter else None
    except FilterError as exc:
        raise bad_request("invalid_filter", f"filter: {exc}") from exc
    scope = await state.store.list_runs(
        team_id=caller.team_id,
        only_run=caller.run_id,
        kind=None,
        status=None,
        name=None,
        tag=None,
        group=group,
        project=project,
        limit=MAX_SEARCH_RUNS + 1,
        before_seq=None,
        query=RunQuery(where=where),
    )
    if len(scope) > MAX_SEARCH_RUNS:
        raise bad_request(
            "too_many_runs",
            f"the search covers more than {MAX_SEARCH_RUNS} runs: narrow it with project, "
            "group or filter",
        )
    names = {run["seq"]: {"id": run["id"], "name": run["name"]} for run in scope}
    after = decode_cursor(cursor, ((int,),))
    hits: list[dict[str, Any]] = await state.store.read(
        search_store.search,
        sorted(names),
        query,
        stream=stream,
        kind=kind,
        step_min=step_min,
        step_max=step_max,
        env=None,
        ok=None,
        reward_min=None,
        reward_max=None,
        limit=limit + 1,
        before_seq=after[0] if after else None,
    )
    hits, next_cursor = await hits_page(state, hits, limit, query)
    for hit in hits:
        hit["run"] = names[hit.pop("run_seq")]
    progress = (
        await state.store.read(search_store.run_progress, sorted(names))
        if names
        else {"pending": 0}
    )
    return JSON({"items": hits, "next_cursor": next_cursor, "runs": len(names), **progress})
