"""The read client: thin calls over the v1 API, cursors followed, errors from openruns.errors."""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

from ..errors import ConfigurationError
from ..settings import Settings
from ..upload.http import ApiClient, retrying

__all__ = ["Client"]

# A read that meets 429/503/5xx or a network error is retried for this long.
RETRY_SECONDS = 30.0
_RUNS_PAGE = 200
_EPISODES_PAGE = 500
_SEARCH_PAGE = 100


class Client:
    """
    A read client of one server. `base_url` and `api_key` default like `openruns.init()`:
    argument, then `OPENRUNS_BASE_URL` / `OPENRUNS_API_KEY`, then the config file. Failures raise
    openruns.errors (NotFoundError, UnauthorizedError, ...). Use as a context manager, or
    `close()` it.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None):
        settings = Settings.resolve({"base_url": base_url, "api_key": api_key})
        if not settings.base_url:
            raise ConfigurationError(
                "no openruns server: pass base_url= or set OPENRUNS_BASE_URL "
                "(e.g. http://127.0.0.1:8765)"
            )
        self.base_url = settings.base_url
        self._http = ApiClient(settings.base_url, settings.api_key)

    def close(self) -> None:
        self._http.close()

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
    ) -> Iterator[dict[str, Any]]:
        """Runs newest first, filtered (name: substring); at most `limit` when given."""
        params = {"kind": kind, "status": status, "name": name, "tag": tag}
        page_size = min(_RUNS_PAGE, limit) if limit else _RUNS_PAGE
        pages = self._pages("/runs", params, page_size)
        return itertools.islice(pages, limit) if limit is not None else pages

    def run(self, run_id: str) -> dict[str, Any]:
        return self._get(_run_path(run_id))

    def metrics(
        self, run_id: str, keys: Sequence[str] | None = None, max_points: int = 0
    ) -> list[dict[str, Any]]:
        """
        Metric history as rows `{"step", "key", "value"}`, by key then step. `max_points=0`:
        every point; otherwise each key is downsampled to at most that many (last value per
        bucket).
        """
        if isinstance(keys, str):
            keys = [keys]
        params: dict[str, Any] = {"max_points": max_points}
        if keys is not None:
            params["keys"] = ",".join(keys)
        series = self._get(f"{_run_path(run_id)}/metrics", params)["series"]
        return [
            {"step": step, "key": key, "value": value}
            for key, s in series.items()
            for step, value in zip(s["step"], s["value"], strict=True)
        ]

    def metrics_frame(
        self,
        run_id: str,
        keys: Sequence[str] | None = None,
        max_points: int = 0,
        frame: str = "pandas",
    ) -> Any:
        """
        `metrics()` as a DataFrame with columns step, key, value (pandas, or polars with
        `frame="polars"`). One column per key: `df.pivot(index="step", columns="key",
        values="value")` in pandas.
        """
        if frame not in ("pandas", "polars"):
            raise ConfigurationError(f"frame must be 'pandas' or 'polars', got {frame!r}")
        try:
            module = importlib.import_module(frame)
        except ImportError as exc:
            raise ConfigurationError(
                f"metrics_frame(frame={frame!r}) needs {frame}, which is not installed: "
                f"pip install {frame}"
            ) from exc
        rows = self.metrics(run_id, keys, max_points)
        columns = {
            "step": [r["step"] for r in rows],
            "key": [r["key"] for r in rows],
            "value": [r["value"] for r in rows],
        }
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
    ) -> Iterator[dict[str, Any]]:
        """
        Index rows (id, stream, step, reward, env, ok, tokens, duration) of a run's episodes
        (or `stream="traces"`), optionally of one step, sorted by `step`, `reward` or
        `-reward` (missing values last). `episode(run_id, row["id"])` fetches a whole record.
        """
        params = {
            "step": step,
            "stream": stream,
            "sort": sort,
            "env": env,
            "ok": None if ok is None else str(ok).lower(),
        }
        yield from self._pages(f"{_run_path(run_id)}/episodes", params, _EPISODES_PAGE)

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

    def episode(self, run_id: str, episode_id: str) -> dict[str, Any]:
        """One whole episode or trace, as it was logged."""
        return self._get(f"{_run_path(run_id)}/episodes/{quote(episode_id, safe='')}")

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
            lambda: self._http.request("GET", path, params=params),
            deadline=time.monotonic() + RETRY_SECONDS,
        )


def _run_path(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")
