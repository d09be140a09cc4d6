"""
The tools of `openruns mcp`: `openruns.api.Client`'s reads as MCP tools (the `mcp` package's
MCPServer), for an agent that inspects runs.

Every answer is one JSON object (the text content, compact, and the same as structured
content) and is bounded, so that one call cannot flood an agent's context: lists take `limit`
(and `offset` where the server has no cursor an agent could keep) and say whether there is
`more`; metric series are downsampled by the server (`max_points` per key, at most
`_MAX_SERIES` keys unless named); an episode's long strings are cut at `max_string_chars`
and the cut counted. The field names are the read API's (docs/server.md, /api/v1/docs).

A failure of the server (unknown run, refused key, server away after the Client's retries) is
a tool error whose text is the openruns error's message, for the agent to read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from .._version import __version__
from ..api import Client
from ..errors import OpenrunsError, TransportError

__all__ = ["TOOL_NAMES", "build_server"]

T = TypeVar("T")

_MAX_SERIES = 20  # metric keys in one get_metrics answer when none are named

INSTRUCTIONS = """\
openruns tracks LLM eval and RL training runs. A run (kind train or eval) has metrics (series by
step, or by time for rows logged without a step), episodes (rollouts: index rows with step,
reward, env, ok, kind train/eval; the whole record on request), per-step aggregates, and the
console output of its processes. Start with list_runs, then get_run; list_metric_keys names the
series get_metrics returns; list_episodes / search_episodes find rollouts that get_episode
reads whole; get_logs reads what the run printed (tracebacks included). All tools only read."""

RunId = Annotated[str, Field(description="the run's id (list_runs gives them)")]
Kind = Annotated[
    Literal["train", "eval"] | None, Field(description="train or eval work; default: both")
]
Stream = Annotated[
    Literal["episodes", "traces"],
    Field(description="episodes (default), or traces: bare traces logged without an episode"),
]
By = Annotated[
    Literal["dispatched", "trained"],
    Field(description="a step is the one episodes were dispatched at (default) or trained at"),
]
Subset = Annotated[str | None, Field(description="the episodes' subset (all, effective, ...)")]
Env = Annotated[str | None, Field(description="only episodes of this environment")]
Ok = Annotated[bool | None, Field(description="only episodes that succeeded (true) or not")]


class ReadTools:
    """The tools, over one Client. Each method is a tool: its name, docstring and annotated
    arguments are what the agent sees (the arguments as JSON schema)."""

    def __init__(self, client: Client):
        self._client = client

    def list_runs(
        self,
        kind: Kind = None,
        status: Annotated[
            Literal["running", "completed", "failed", "cancelled", "crashed"] | None,
            Field(description="only runs with this status; default: any"),
        ] = None,
        name: Annotated[str | None, Field(description="name contains this (any case)")] = None,
        tag: Annotated[str | None, Field(description="has this tag")] = None,
        project: Annotated[str | None, Field(description="in this project, exactly")] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="at most this many runs")] = 20,
    ) -> CallToolResult:
        """Runs, newest first: id, name, kind, status, model, tags, summary, times, group,
        project, error. A run's config text is left out here (get_run has it). `more`: runs
        beyond `limit` match."""
        found = self._call(
            lambda c: list(
                c.runs(
                    kind=kind,
                    status=status,
                    name=name,
                    tag=tag,
                    project=project,
                    limit=limit + 1,
                )
            )
        )
        runs = [_without_config_text(run) for run in found[:limit]]
        return _answer({"runs": runs, "more": len(found) > limit})

    def get_run(
        self,
        run_id: RunId,
        max_string_chars: Annotated[
            int, Field(ge=100, le=1_000_000, description="cut longer strings (the config text)")
        ] = 20_000,
    ) -> CallToolResult:
        """One run: metadata, status (with who set it and its history), error, summary,
        config (its text, format and filename), losses, times, notes, url."""
        run, clipped = _clip(self._call(lambda c: c.run(run_id)), max_string_chars)
        return _answer({"run": run, "clipped_strings": clipped})

    def list_metric_keys(
        self,
        run_id: RunId,
        limit: Annotated[int, Field(ge=1, le=5000, description="at most this many keys")] = 500,
    ) -> CallToolResult:
        """A run's metric keys: key, label, axis (step, or time for rows logged without a
        step), last_step, last_ts, last_value, count."""
        keys = self._call(lambda c: c.metric_keys(run_id))
        return _answer({"keys": keys[:limit], "more": max(0, len(keys) - limit)})

    def get_metrics(
        self,
        run_id: RunId,
        keys: Annotated[
            list[str] | None,
            Field(description=f"the metric keys; default: all (at most {_MAX_SERIES})"),
        ] = None,
        max_points: Annotated[
            int,
            Field(ge=2, le=5000, description="each key downsampled to at most this many points"),
        ] = 50,
        kind: Annotated[
            Literal["train", "eval"] | None,
            Field(description="eval: the keys under eval/; train: the others; default: all"),
        ] = None,
    ) -> CallToolResult:
        """Metric history, downsampled by the server (the last value of each bucket):
        `series` {key: {step: [...], value: [...]}}, and `by_time` {key: {ts: [...],
        value: [...]}} for the rows logged without a step. `omitted_keys`: how many keys were
        left out (name them in `keys`)."""
        rows = self._call(lambda c: c.metrics(run_id, keys, max_points=max_points, kind=kind))
        series: dict[str, dict[str, list[Any]]] = {}
        by_time: dict[str, dict[str, list[Any]]] = {}
        for row in rows:
            timed = row["step"] is None
            table, x = (by_time, "ts") if timed else (series, "step")
            if row["key"] not in table:
                table[row["key"]] = {x: [], "value": []}
            table[row["key"]][x].append(row["ts"] if timed else row["step"])
            table[row["key"]]["value"].append(row["value"])
        names = sorted(set(series) | set(by_time))
        kept = set(names[:_MAX_SERIES]) if keys is None else set(names)
        return _answer(
            {
                "series": {k: v for k, v in series.items() if k in kept},
                "by_time": {k: v for k, v in by_time.items() if k in kept},
                "omitted_keys": len(names) - len(kept),
            }
        )

    def get_steps(
        self,
        run_id: RunId,
        stream: Stream = "episodes",
        by: By = "dispatched",
        kind: Kind = None,
        subset: Subset = None,
        env: Env = None,
        offset: Annotated[int, Field(ge=0, description="skip this many steps")] = 0,
        limit: Annotated[int, Field(ge=1, le=2000, description="at most this many steps")] = 200,
    ) -> CallToolResult:
        """Per step of a run's episodes, ascending: step, count, avg_reward, off_policy (how
        many were trained at another step than dispatched at). `total`: steps in all."""
        steps = self._call(
            lambda c: c.steps(run_id, stream=stream, by=by, kind=kind, subset=subset, env=env)
        )
        return _answer({"steps": steps[offset : offset + limit], "total": len(steps)})

    def list_episodes(
        self,
        run_id: RunId,
        step: Annotated[int | None, Field(description="only this step's episodes")] = None,
        sort: Annotated[
            Literal["step", "reward", "-reward"],
            Field(description="step (default), reward or -reward (best first)"),
        ] = "step",
        stream: Stream = "episodes",
        env: Env = None,
        ok: Ok = None,
        kind: Kind = None,
        subset: Subset = None,
        by: By = "dispatched",
        offset: Annotated[int, Field(ge=0, le=100_000, description="skip this many episodes")] = 0,
        limit: Annotated[int, Field(ge=1, le=500, description="at most this many")] = 50,
    ) -> CallToolResult:
        """Index rows of a run's episodes: id, stream, step, reward, env, ok, tokens,
        duration, kind, subset, trained_step. get_episode reads one whole. `more`: rows
        beyond this page (the next page: offset + limit)."""

        def page(c: Client) -> list[dict[str, Any]]:
            rows = c.episodes(
                run_id,
                step=step,
                stream=stream,
                sort=sort,
                env=env,
                ok=ok,
                kind=kind,
                subset=subset,
                by=by,
            )
            return _slice(rows, offset, limit + 1)

        rows = self._call(page)
        return _answer({"episodes": rows[:limit], "more": len(rows) > limit})

    def get_episode(
        self,
        run_id: RunId,
        episode_id: Annotated[str, Field(description="the id from list_episodes or a search")],
        annotations: Annotated[
            bool, Field(description="fold in the annotations about it (default) or not")
        ] = True,
        max_string_chars: Annotated[
            int,
            Field(ge=100, le=1_000_000, description="cut longer strings (messages, outputs)"),
        ] = 4000,
    ) -> CallToolResult:
        """One whole episode (or trace) as it was logged: its traces and messages, rewards,
        info, errors, with the annotations about it folded in. Strings longer than
        `max_string_chars` are cut (marked, and counted in `clipped_strings`)."""
        record = self._call(lambda c: c.episode(run_id, episode_id, annotations=annotations))
        episode, clipped = _clip(record, max_string_chars)
        return _answer({"episode": episode, "clipped_strings": clipped})

    def search_episodes(
        self,
        run_id: RunId,
        q: Annotated[
            str,
            Field(
                min_length=1,
                description='words (all must match), "quoted phrases", prefix* words; any case',
            ),
        ],
        stream: Stream = "episodes",
        kind: Kind = None,
        step_min: Annotated[int | None, Field(description="only steps from this one")] = None,
        step_max: Annotated[int | None, Field(description="only steps up to this one")] = None,
        env: Env = None,
        ok: Ok = None,
        reward_min: Annotated[float | None, Field(description="reward at least this")] = None,
        reward_max: Annotated[float | None, Field(description="reward at most this")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="at most this many hits")] = 20,
    ) -> CallToolResult:
        """Full-text search of a run's episodes, newest first: index rows plus `snippets`
        ({label, text, matches: [[start, end], ...]}). Records uploaded a moment ago may not
        be indexed yet."""
        hits = self._call(
            lambda c: list(
                c.search(
                    run_id,
                    q,
                    stream=stream,
                    kind=kind,
                    step_min=step_min,
                    step_max=step_max,
                    env=env,
                    ok=ok,
                    reward_min=reward_min,
                    reward_max=reward_max,
                    limit=limit + 1,
                )
            )
        )
        return _answer({"hits": hits[:limit], "more": len(hits) > limit})

    def get_logs(
        self,
        run_id: RunId,
        after: Annotated[
            int | None,
            Field(
                ge=-1,
                description="the lines after this offset (a line's `offset`; -1: from the "
                "start); default: the last `limit` lines",
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=5000, description="at most this many lines")] = 200,
        stream: Annotated[
            Literal["stdout", "stderr", "traceback", "output"] | None,
            Field(description="only this stream; default: all"),
        ] = None,
        source: Annotated[
            str | None, Field(description='only this source ("main", a component)')
        ] = None,
    ) -> CallToolResult:
        """What a run's processes printed, oldest first: lines {offset, ts, stream, source,
        line}; by default the last `limit` lines, else the first `limit` after `after`.
        `totals`: lines and bytes received, and those dropped (the server keeps a run's
        output within a bound by dropping the middle). `next_after`: pass it as `after` to
        read on."""

        def read(c: Client) -> dict[str, Any]:
            if after is None:
                lines = list(c.logs(run_id, stream=stream, source=source, tail=limit))
            else:
                start = None if after < 0 else after
                lines = _slice(c.logs(run_id, stream=stream, source=source, after=start), 0, limit)
            next_after = lines[-1]["offset"] if lines else after
            return {"lines": lines, "totals": c.log_totals(run_id), "next_after": next_after}

        return _answer(self._call(read))

    def _call(self, read: Callable[[Client], T]) -> T:
        """`read(client)`, an openruns error turned into the tool error the agent reads."""
        try:
            return read(self._client)
        except TransportError as exc:  # no answer: say from where, the agent cannot see it
            message = f"{exc}; no answer from the openruns server at {self._client.base_url}"
            raise ToolError(" ".join(message.split())) from exc
        except OpenrunsError as exc:
            raise ToolError(" ".join(str(exc).split())) from exc


TOOL_NAMES = (
    "list_runs",
    "get_run",
    "list_metric_keys",
    "get_metrics",
    "get_steps",
    "list_episodes",
    "get_episode",
    "search_episodes",
    "get_logs",
)


def build_server(client: Client) -> MCPServer:
    """An MCPServer with every tool of TOOL_NAMES over `client`; `.run("stdio")` serves it."""
    server: MCPServer = MCPServer(
        "openruns",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",  # not httpx's line per request on the agent's stderr
    )
    tools = ReadTools(client)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    for name in TOOL_NAMES:
        server.add_tool(getattr(tools, name), name=name, annotations=read_only)
    return server


def _answer(document: dict[str, Any]) -> CallToolResult:
    """One JSON object: compact as text (what most agents read) and as structured content."""
    import orjson

    text = orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode()
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=document
    )


def _slice(items: Iterable[T], offset: int, count: int) -> list[T]:
    return list(itertools.islice(items, offset, offset + count))


def _without_config_text(run: dict[str, Any]) -> dict[str, Any]:
    config = run.get("config")
    if not isinstance(config, dict):
        return run
    return {**run, "config": {k: v for k, v in config.items() if k != "text"}}


def _clip(value: Any, limit: int) -> tuple[Any, int]:
    """`value` with every string longer than `limit` cut to `limit` characters and a marker
    saying how many were left out; and how many strings were cut."""
    counter = itertools.count()

    def walk(v: Any) -> Any:
        if isinstance(v, str) and len(v) > limit:
            next(counter)
            return f"{v[:limit]}... [{len(v) - limit} more characters]"
        if isinstance(v, dict):
            return {k: walk(item) for k, item in v.items()}
        if isinstance(v, list):
            return [walk(item) for item in v]
        return v

    clipped = walk(value)
    return clipped, next(counter)
