"""The read client: thin calls over the v1 API, cursors followed, errors from openruns.errors."""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast
from urllib.parse import quote

from ..errors import ConfigurationError
from ..settings import Settings
from ..spec import MAX_STEPS_PAGE
from ..wire import WireClient, retrying

__all__ = ["Client"]

_RUNS_PAGE = 200
_EPISODES_PAGE = 500
_SEARCH_PAGE = 100
_LOGS_PAGE = 5000  # the server's largest page
_KEYS_PAGE = 5000  # the server's largest page of metric keys
_SERIES_KEYS = 500  # the most keys the server reads series of in one request


class Client:
    """
    A read client of one server. `base_url` and `api_key` default like `openruns.init()`:
    argument, then `OPENRUNS_BASE_URL` / `OPENRUNS_API_KEY`, then the config file. Failures raise
    openruns.errors (NotFoundError, UnauthorizedError, ...); a transient failure is retried for
    the `retry_timeout` setting first. Use as a context manager, or `close()` it.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None):
        settings = Settings.resolve({"base_url": base_url, "api_key": api_key})
        if not settings.base_url:
            raise ConfigurationError(
                "no openruns server: pass base_url= or set OPENRUNS_BASE_URL "
                "(e.g. http://127.0.0.1:8765)"
            )
        self.base_url = settings.base_url
        self._retry_timeout = settings.retry_timeout
        self._wire = WireClient.from_settings(settings)

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def runs(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        name: str | None = None,
        tag: str | None = None,
        limit: int | None = None,
        project: str | None = None,
        group: str | None = None,
        filter: str | None = None,
        sort: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """
        Runs newest first, filtered (name: substring; project, group: exactly); at most
        `limit` when given. `filter` is an expression over config, summary, latest metric
        values and the run's columns (`"config.lr < 1e-5 and summary.reward > 0.5"`), `sort` a
        field with `-` for descending (`"-metric:reward"`), `columns` fields answered in each
        run's `values` (the server's docs/server.md has the language). A bad expression raises
        the server's 400, naming the token and its position.
        """
        params = {
            "kind": kind,
            "status": status,
            "name": name,
            "tag": tag,
            "project": project,
            "group": group,
            "filter": filter,
            "sort": sort,
            "columns": _fields(columns) if columns else None,
        }
        page_size = min(_RUNS_PAGE, limit) if limit else _RUNS_PAGE
        pages = self._pages("/runs", params, page_size)
        return itertools.islice(pages, limit) if limit is not None else pages

    def runs_frame(
        self,
        columns: Sequence[str],
        *,
        filter: str | None = None,
        sort: str | None = None,
        limit: int | None = None,
        project: str | None = None,
        group: str | None = None,
        frame: str = "pandas",
    ) -> Any:
        """
        Runs × chosen fields as a DataFrame (pandas, or polars with `frame="polars"`): one row
        per run with `id`, `name`, `status`, then a column per field of `columns`
        (`["config.lr", "summary.reward", "metric:loss"]`: config and summary values, the
        latest value of a metric), None where a run has none; runs as `runs()` lists them.
        """
        module = _frame_module(frame, "runs_frame")
        fields = list(dict.fromkeys(columns))
        runs = self.runs(
            filter=filter,
            sort=sort,
            limit=limit,
            project=project,
            group=group,
            columns=fields,
        )
        table: dict[str, list[Any]] = {name: [] for name in ("id", "name", "status", *fields)}
        for run in runs:
            for name in ("id", "name", "status"):
                table[name].append(run[name])
            for field in fields:
                table[field].append((run.get("values") or {}).get(field))
        return module.DataFrame(table)

    def run(self, run_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self._get(_run_path(run_id)))

    def metric_keys(
        self, run_id: str, *, q: str | None = None, prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """
        Every metric key of a run (or those containing `q`, any case, or starting with
        `prefix`): `{"key", "label", "axis", "last_step", "last_ts", "last_value", "count"}` by
        key, `axis` "step" or "time" (the rows logged without a step). A key logged both ways
        has an entry per axis, the time one labelled `"<key> (by time)"`: show `label`, not
        `key`. Read in pages of _KEYS_PAGE keys.
        """
        params = {"q": q, "prefix": prefix}
        return list(self._pages(f"{_run_path(run_id)}/metrics/keys", params, _KEYS_PAGE))

    def metrics(
        self,
        run_id: str,
        keys: Sequence[str] | None = None,
        max_points: int = 0,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        """
        Metric history as rows `{"step", "key", "value", "ts"}`, by key then step, then the rows
        logged without a step (`step` None, `ts` their time), by key then time; `ts` is None
        for step-keyed rows. `max_points=0`: every point; otherwise each key is downsampled to
        at most that many (last value per bucket). `kind="eval"`: the keys under `eval/`;
        `kind="train"`: the others.
        """
        if isinstance(keys, str):
            keys = [keys]
        if keys is None:
            keys = list(dict.fromkeys(row["key"] for row in self.metric_keys(run_id)))
        params: dict[str, Any] = {"max_points": max_points, "kind": kind}
        params = {k: v for k, v in params.items() if v is not None}
        stepped: list[dict[str, Any]] = []
        timed: list[dict[str, Any]] = []
        # The server reads the series of at most _SERIES_KEYS keys a request.
        for i in range(0, len(keys), _SERIES_KEYS):
            names = ",".join(keys[i : i + _SERIES_KEYS])
            body = self._get(f"{_run_path(run_id)}/metrics", {**params, "keys": names})
            stepped += [
                {"step": step, "key": key, "value": value, "ts": None}
                for key, s in body["series"].items()
                for step, value in zip(s["step"], s["value"], strict=True)
            ]
            timed += [
                {"step": None, "key": key, "value": value, "ts": ts}
                for key, s in body.get("time", {}).items()
                for ts, value in zip(s["ts"], s["value"], strict=True)
            ]
        return stepped + timed

    def metrics_frame(
        self,
        run_id: str,
        keys: Sequence[str] | None = None,
        max_points: int = 0,
        frame: str = "pandas",
        kind: str | None = None,
    ) -> Any:
        """
        `metrics()` as a DataFrame with columns step, key, value, ts (pandas, or polars with
        `frame="polars"`). One column per key: `df.pivot(index="step", columns="key",
        values="value")` in pandas (time-keyed rows have no step: select them by `ts`).
        """
        module = _frame_module(frame, "metrics_frame")
        rows = self.metrics(run_id, keys, max_points, kind)
        columns = {name: [r[name] for r in rows] for name in ("step", "key", "value", "ts")}
        return module.DataFrame(columns)

    def episodes(
        self,
        run_id: str,
        *,
        step: int | None = None,
        stream: str = "episodes",
        sort: str = "step",
        env: str | None = None,
        ok: bool | None = None,
        kind: str | None = None,
        subset: str | None = None,
        by: str = "dispatched",
    ) -> Iterator[dict[str, Any]]:
        """
        Index rows (id, stream, step, reward, env, ok, tokens, duration, kind, subset,
        trained_step) of a run's episodes (or `stream="traces"`), optionally of one step,
        sorted by `step`, `reward` or `-reward` (missing values last). `step` is the step they
        were dispatched at, or with `by="trained"` the step they were trained at.
        `episode(run_id, row["id"])` fetches a whole record.
        """
        params = {
            "step": step,
            "stream": stream,
            "sort": sort,
            "env": env,
            "ok": None if ok is None else str(ok).lower(),
            "kind": kind,
            "subset": subset,
            "by": by,
        }
        yield from self._pages(f"{_run_path(run_id)}/episodes", params, _EPISODES_PAGE)

    def steps(
        self,
        run_id: str,
        *,
        stream: str = "episodes",
        by: str = "dispatched",
        kind: str | None = None,
        subset: str | None = None,
        env: str | None = None,
    ) -> list[dict[str, Any]]:
        """Per step (dispatched at, or `by="trained"`): count, avg_reward and off_policy (how
        many of its episodes were trained at another step than dispatched at); every step of
        the run, read a page at a time."""
        params = {"stream": stream, "by": by, "kind": kind, "subset": subset, "env": env}
        query: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
        query["limit"] = MAX_STEPS_PAGE
        rows: list[dict[str, Any]] = []
        while True:
            page = cast(list[dict[str, Any]], self._get(f"{_run_path(run_id)}/steps", query))
            rows.extend(page)
            if len(page) < MAX_STEPS_PAGE or page[-1]["step"] is None:
                return rows
            query["after"] = page[-1]["step"]

    def episode(self, run_id: str, episode_id: str, *, annotations: bool = True) -> dict[str, Any]:
        """One whole episode or trace, as it was logged, with the annotations about it folded
        in (`annotations=False`: exactly as logged)."""
        params = None if annotations else {"annotations": "false"}
        path = f"{_run_path(run_id)}/episodes/{quote(episode_id, safe='')}"
        return cast(dict[str, Any], self._get(path, params))

    def annotations(self, run_id: str, episode_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Annotations as they were logged (with producer and ts), in stored order; of one
        episode when `episode_id` is given."""
        params = {"episode_id": episode_id}
        yield from self._pages(f"{_run_path(run_id)}/annotations", params, 1000)

    def logs(
        self,
        run_id: str,
        *,
        stream: str | None = None,
        source: str | None = None,
        tail: int | None = None,
        after: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """
        The console lines stored for a run, in the order they arrived: `{"offset", "ts",
        "stream" (stdout | stderr | traceback | output), "source" ("main", a launched
        component, "job step"), "line"}`. `stream` / `source`: only those. `tail=N`: only the
        last N lines (still oldest first). `after`: only the lines after that offset (a line's
        `offset`; pass the last one seen to read what arrived since). The server keeps a run's
        output within its bound by dropping the middle: `log_totals()` says how much.
        """
        if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or tail < 1):
            raise ConfigurationError(f"tail must be a positive number of lines, got {tail!r}")
        query: dict[str, Any] = {"stream": stream, "source": source}
        return self._log_lines(f"{_run_path(run_id)}/logs", query, tail, after)

    def _log_lines(
        self, path: str, query: dict[str, Any], tail: int | None, after: int | None
    ) -> Iterator[dict[str, Any]]:
        if tail is None:
            cursor = after
            while True:
                items = self._get(path, {**query, "after": cursor, "limit": _LOGS_PAGE})["items"]
                yield from items
                if len(items) < _LOGS_PAGE:
                    return
                cursor = items[-1]["offset"]
        pages: list[list[dict[str, Any]]] = []  # newest first, read backwards from the end
        before, wanted = None, tail
        while wanted > 0:
            limit = min(wanted, _LOGS_PAGE)
            params = {**query, "tail": "true", "before": before, "after": after, "limit": limit}
            items = self._get(path, params)["items"]
            pages.append(items)
            wanted -= len(items)
            if len(items) < limit:
                break
            before = items[0]["offset"]
        for items in reversed(pages):
            yield from items

    def log_totals(self, run_id: str) -> dict[str, Any]:
        """What a run printed, as the server counts it: `lines` and `bytes` received,
        `dropped_lines` and `dropped_bytes` (the middle dropped to keep the run within the
        server's bound), `gap_offset` (where the gap is; None without one)."""
        body = self._get(f"{_run_path(run_id)}/logs", {"limit": 1, "tail": "true"})
        return dict(body["totals"])

    def retention(self, run_id: str) -> dict[str, Any]:
        """What the server's retention policy did to a run (issue 22): `reduced`, and once a
        pass reduced it the `rule`, `reduced_at`, `episodes_kept`, `bytes_kept`,
        `episodes_dropped`, `bytes_dropped` (docs/server.md, Retention)."""
        return dict(self._get(f"{_run_path(run_id)}/retention"))

    def search(
        self,
        run_id: str,
        q: str,
        *,
        stream: str = "episodes",
        kind: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        env: str | None = None,
        ok: bool | None = None,
        reward_min: float | None = None,
        reward_max: float | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """
        Records of a run whose text has every word of `q` (words, "quoted phrases", prefix*
        words; case-insensitive), newest first: index rows plus `snippets`, each
        `{"label", "text", "matches": [[start, end], ...]}`. `kind` is the work (train / eval).
        The index is built behind ingest, so records uploaded a moment ago may not match yet.
        """
        params = {
            "q": q,
            "stream": stream,
            "kind": kind,
            "step_min": step_min,
            "step_max": step_max,
            "env": env,
            "ok": None if ok is None else str(ok).lower(),
            "reward_min": reward_min,
            "reward_max": reward_max,
        }
        page_size = min(_SEARCH_PAGE, limit) if limit else _SEARCH_PAGE
        pages = self._pages(f"{_run_path(run_id)}/search", params, page_size)
        return itertools.islice(pages, limit) if limit is not None else pages

    def search_runs(
        self,
        q: str,
        *,
        project: str | None = None,
        group: str | None = None,
        filter: str | None = None,
        stream: str = "episodes",
        kind: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """
        `search()` over the episodes of many runs: those of a project, a group and/or a run
        filter (the language of `runs(filter=)`), at most 1000 runs (a wider scope raises the
        server's 400). Each hit names its run: `hit["run"] == {"id", "name"}`.
        """
        params = {
            "q": q,
            "project": project,
            "group": group,
            "filter": filter,
            "stream": stream,
            "kind": kind,
        }
        page_size = min(_SEARCH_PAGE, limit) if limit else _SEARCH_PAGE
        pages = self._pages("/search", params, page_size)
        return itertools.islice(pages, limit) if limit is not None else pages

    def _pages(self, path: str, params: dict[str, Any], limit: int) -> Iterator[dict[str, Any]]:
        query = {k: v for k, v in params.items() if v is not None}
        query["limit"] = limit
        while True:
            page = self._get(path, query)
            yield from page["items"]
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return retrying(
            lambda: self._wire.get(path, params),
            deadline=time.monotonic() + self._retry_timeout,
        )


def _frame_module(frame: str, caller: str) -> Any:
    """pandas or polars, imported on use; ConfigurationError naming what to install."""
    if frame not in ("pandas", "polars"):
        raise ConfigurationError(f"frame must be 'pandas' or 'polars', got {frame!r}")
    try:
        return importlib.import_module(frame)
    except ImportError as exc:
        raise ConfigurationError(
            f"{caller}(frame={frame!r}) needs {frame}, which is not installed: pip install {frame}"
        ) from exc


def _fields(columns: Sequence[str]) -> str:
    if isinstance(columns, str):
        raise ConfigurationError("columns must be a list of fields, not one string")
    return ",".join(columns)


def _run_path(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")
