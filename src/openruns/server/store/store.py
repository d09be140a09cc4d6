"""
Store: every metadata read and write the server makes, as awaitable methods.

    store = Store.open(settings.sqlalchemy_url(), heartbeat_timeout=300)
    run, created = await store.create_run("team", {"id": ..., "kind": "eval"}, None)
    await store.ingest_metrics(run["seq"], key, [(rows, points)])
    store.close()

Each method is one transaction (db.py). The SQL lives in the modules next to this one, one
per concern; this class only sequences them. A run that is running but silent past the
heartbeat timeout is marked crashed when it is read, as well as by the server's periodic
sweep, so the rule holds whichever replica answers.

Bulk uploads take the run's write lock (sql.lock_run) before checking their receipt, so on
PostgreSQL a replay racing its first attempt on another replica waits for it and then answers
its receipt; the receipts' primary key is the last line of defence (a duplicate rolls the
whole upload back). Either way nothing is stored twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection

from . import (
    episodes,
    keys,
    logs,
    metric_times,
    metrics,
    prime,
    rewards,
    runs,
    search,
    sessions,
    timeline,
)
from .annotations import add as add_annotations
from .annotations import of_episode as annotations_of_episode
from .annotations import page as annotations_page
from .db import Database
from .receipts import get_receipt, put_receipt
from .sql import lock_run

__all__ = ["Store"]

T = TypeVar("T")
P = ParamSpec("P")


class Store:
    def __init__(self, db: Database, heartbeat_timeout: float):
        self.db = db
        self.heartbeat_timeout = heartbeat_timeout
        # Runs are not crashed for silence from before this server started (it was down).
        self.started_at = time.time()
        self.secret: bytes = db.write_sync(keys.server_secret)

    @classmethod
    def open(
        cls,
        url: str,
        heartbeat_timeout: float = 300.0,
        query_timeout: float = 30.0,
        pool_size: int = 8,
        pool_timeout: float = 10.0,
    ) -> Store:
        """Connect, migrate to the newest schema, load the server secret."""
        db = Database.open(url, query_timeout, pool_size, pool_timeout)
        try:
            return cls(db, heartbeat_timeout)
        except BaseException:
            db.close()
            raise

    def close(self) -> None:
        self.db.close()

    # -- the door ---------------------------------------------------------------------------
    # `await store.read(module.fn, *args)`: one SQL function of this package in one
    # transaction, its arguments checked against `fn` itself. New code calls SQL this way;
    # the methods below remain where they sequence several functions or add a rule.

    async def read(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self.db.read(fn, *args, **kwargs)

    async def write(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self.db.write(fn, *args, **kwargs)

    # -- runs -------------------------------------------------------------------------------

    async def create_run(
        self,
        team_id: str,
        fields: dict[str, Any],
        create_key: str | None,
        ids_per_team: bool = True,
    ) -> tuple[dict[str, Any], bool]:
        run, created = await self.db.write(
            runs.create_run, team_id, fields, create_key, time.time(), ids_per_team
        )
        if not created:
            run = await self._fresh(run)
        return run, created

    async def get_run(self, run_id: str, team_id: str | None = None) -> dict[str, Any] | None:
        """Run `run_id` of `team_id` (None: of any team, the first made with that id)."""
        run = await self.db.read(runs.get_run, run_id, team_id)
        return await self._fresh(run) if run is not None else None

    async def run_teams(self, run_id: str) -> list[tuple[int, str]]:
        return await self.db.read(runs.run_teams, run_id)

    async def list_runs(self, **filters: Any) -> list[dict[str, Any]]:
        page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        now = time.time()
        if any(runs.stale_error(r, now, self.heartbeat_timeout, self.started_at) for r in page):
            await self.sweep()
            page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        return page

    async def patch_run(self, run: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        await self.db.write(runs.patch_run, run["seq"], changes, time.time())
        return await self._reread(run)

    async def finish_run(
        self,
        run: dict[str, Any],
        status: str,
        error: str | None,
        changes: dict[str, Any],
        times: dict[str, float] | None = None,
    ) -> dict[str, Any]:
        """`times`: the run's own finished_at / last_heartbeat_at (a run uploaded later)."""
        await self.db.write(
            runs.finish_run, run["seq"], status, error, changes, time.time(), times or {}
        )
        return await self._reread(run)

    async def heartbeat(self, run: dict[str, Any]) -> str:
        return await self.db.write(runs.heartbeat, run["seq"], time.time())

    async def sweep(self) -> int:
        """Mark every run silent past the heartbeat timeout as crashed."""
        return await self.db.write(
            runs.crash_stale, time.time(), self.heartbeat_timeout, None, self.started_at
        )

    async def _fresh(self, run: dict[str, Any]) -> dict[str, Any]:
        if runs.stale_error(run, time.time(), self.heartbeat_timeout, self.started_at) is None:
            return run
        await self.db.write(
            runs.crash_stale, time.time(), self.heartbeat_timeout, run["seq"], self.started_at
        )
        return await self._reread(run)

    async def _reread(self, run: dict[str, Any]) -> dict[str, Any]:
        fresh = await self.db.read(runs.get_run_by_seq, run["seq"])
        assert fresh is not None  # runs are never deleted
        return fresh

    # -- keys -------------------------------------------------------------------------------

    async def team_of_key(self, key: str) -> tuple[int, str] | None:
        return await self.db.read(keys.team_of_key, key)

    # -- dashboard sessions -----------------------------------------------------------------

    async def open_session(
        self, token_hash: str, key_id: int, team_id: str, lifetime: float
    ) -> float:
        """Store a session; returns when it expires."""
        now = time.time()
        expires_at = now + lifetime
        await self.db.write(sessions.open_session, token_hash, key_id, team_id, now, expires_at)
        return expires_at

    async def session(self, token_hash: str) -> tuple[int, str, float] | None:
        """(key id, team, expires at) of a live session, else None."""
        return await self.db.read(sessions.session_caller, token_hash, time.time())

    async def session_caller(self, token_hash: str) -> tuple[int, str] | None:
        found = await self.session(token_hash)
        return (found[0], found[1]) if found else None

    async def close_session(self, token_hash: str) -> None:
        await self.db.write(sessions.close_session, token_hash)

    # -- bulk uploads -----------------------------------------------------------------------

    async def receipt(
        self, run_seq: int, kind: str, key: str, digest: str | None = None
    ) -> dict[str, Any] | None:
        """The first answer to `key`; 422 when it answered another body than `digest`'s."""
        return await self.db.read(get_receipt, run_seq, kind, key, digest)

    async def ingest_metrics(
        self,
        run_seq: int,
        key: str,
        chunks: Iterable[tuple[int, metrics.MetricPoints]],
        digest: str | None = None,
    ) -> dict[str, Any]:
        """
        Merge the points of every (rows, points) chunk, in order, and store the receipt, all
        in one transaction, unless `key` was stored already: then nothing of `chunks` is read.
        The chunks are read inside the transaction (they may parse the upload as they go: an
        error there rolls everything back); block summaries are rebuilt once, at the end.
        """

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, "metrics", key, digest)
            if prior is not None:
                return prior
            rows = 0
            touched: dict[int, set[int]] = {}
            for count, points in chunks:
                rows += count
                metrics.write_points(conn, run_seq, points, touched)
            metrics.rebuild_blocks(conn, touched)
            receipt = {"status": "committed", "rows": rows, "receipt": key}
            put_receipt(conn, run_seq, "metrics", key, receipt, time.time(), digest)
            return receipt

        return await self.db.write(write)

    async def commit_segment(
        self,
        run_seq: int,
        key: str,
        stream: str,
        blob_key: str,
        nbytes: int,
        index: list[dict[str, Any]],
        digest: str | None = None,
    ) -> dict[str, Any]:
        """Index a segment already durable in the blob store, with its receipt, unless `key` was
        stored already (then the blob just written stays unreferenced). Records whose id the
        run's stream has already are not indexed again: the first one stays (episodes.py);
        the receipt counts them as `duplicates`."""

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, stream, key, digest)
            if prior is not None:
                return prior
            now = time.time()
            added = episodes.add_segment(conn, run_seq, stream, blob_key, nbytes, index, now)
            receipt: dict[str, Any] = {"status": "committed", "records": added, "receipt": key}
            if added < len(index):
                receipt["duplicates"] = len(index) - added
            put_receipt(conn, run_seq, stream, key, receipt, now, digest)
            return receipt

        return await self.db.write(write)

    async def ingest_annotations(
        self, run_seq: int, key: str, rows: list[dict[str, Any]], digest: str | None = None
    ) -> dict[str, Any]:
        """Append the annotations and store the receipt, unless `key` was stored already."""

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, "annotations", key, digest)
            if prior is not None:
                return prior
            add_annotations(conn, run_seq, rows)
            trained: dict[str, int] = {}
            for row in rows:
                if row["step"] is not None:
                    trained[row["episode_id"]] = max(
                        row["step"], trained.get(row["episode_id"], row["step"])
                    )
            episodes.mark_trained(conn, run_seq, trained)
            receipt = {"status": "committed", "annotations": len(rows), "receipt": key}
            put_receipt(conn, run_seq, "annotations", key, receipt, time.time(), digest)
            return receipt

        return await self.db.write(write)

    async def ingest_logs(
        self,
        run_seq: int,
        key: str,
        rows: list[dict[str, Any]],
        max_bytes: int,
        digest: str | None = None,
    ) -> dict[str, Any]:
        """Append console lines (store/logs.py) and store the receipt, unless `key` was stored
        already."""

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, "logs", key, digest)
            if prior is not None:
                return prior
            logs.append(conn, run_seq, rows, max_bytes)
            receipt = {"status": "committed", "lines": len(rows), "receipt": key}
            put_receipt(conn, run_seq, "logs", key, receipt, time.time(), digest)
            return receipt

        return await self.db.write(write)

    # -- reads ------------------------------------------------------------------------------

    async def log_page(self, run_seq: int, **query: Any) -> list[dict[str, Any]]:
        return await self.db.read(lambda conn: logs.page(conn, run_seq, **query))

    async def log_totals(self, run_seq: int) -> dict[str, Any]:
        return await self.db.read(logs.totals, run_seq)

    async def annotations_of(self, run_seq: int, episode_id: str) -> list[dict[str, Any]]:
        return await self.db.read(annotations_of_episode, run_seq, episode_id)

    async def annotation_page(
        self, run_seq: int, after_seq: int, limit: int, episode_id: str | None = None
    ) -> list[dict[str, Any]]:
        return await self.db.read(annotations_page, run_seq, after_seq, limit, episode_id)

    async def metric_keys(self, run_seq: int) -> list[dict[str, Any]]:
        return await self.db.read(metrics.key_stats, run_seq)

    async def metric_series(
        self,
        run_seq: int,
        names: list[str] | None,
        step_min: int,
        step_max: int,
        max_points: int,
    ) -> tuple[dict[str, dict[str, list[Any]]], bool]:
        return await self.db.read(metrics.series, run_seq, names, step_min, step_max, max_points)

    async def metric_time_series(
        self,
        run_seq: int,
        names: list[str] | None,
        ts_min: float | None,
        ts_max: float | None,
        max_points: int,
    ) -> tuple[dict[str, dict[str, list[Any]]], bool]:
        return await self.db.read(
            metric_times.time_series, run_seq, names, ts_min, ts_max, max_points
        )

    async def metric_time_points(
        self, key_id: int, after_ts: float, limit: int
    ) -> list[tuple[float, float]]:
        return await self.db.read(metric_times.time_points_page, key_id, after_ts, limit)

    async def metric_key_ids(self, run_seq: int) -> list[tuple[str, int]]:
        return await self.db.read(metrics.run_keys, run_seq)

    async def metric_points(
        self, key_id: int, after_step: int, limit: int
    ) -> list[tuple[int, float, float | None]]:
        return await self.db.read(metrics.points_page, key_id, after_step, limit)

    async def steps(
        self, run_seq: int, stream: str, step_min: int | None = None, **query: Any
    ) -> list[dict[str, Any]]:
        return await self.db.read(
            lambda conn: episodes.steps(conn, run_seq, stream, step_min, **query)
        )

    async def list_episodes(
        self, run_seq: int, **query: Any
    ) -> tuple[list[dict[str, Any]], tuple[Any, int] | None]:
        return await self.db.read(lambda conn: episodes.list_episodes(conn, run_seq, **query))

    async def locate_episode(self, run_seq: int, episode_id: str) -> dict[str, Any] | None:
        return await self.db.read(episodes.locate, run_seq, episode_id)

    async def episode_page(
        self, run_seq: int, stream: str, after_seq: int, limit: int, **filters: Any
    ) -> list[dict[str, Any]]:
        return await self.db.read(
            lambda conn: episodes.page_for_export(
                conn, run_seq, stream, after_seq, limit, **filters
            )
        )

    # -- the Prime wire (server/prime/; SQL in prime.py) ------------------------------------

    async def prime_environment(self, team_id: str, owner: str, name: str) -> dict[str, Any]:
        return await self.db.write(prime.resolve_environment, team_id, owner, name, time.time())

    async def prime_environment_names(self, team_id: str, ids: list[str]) -> dict[str, str]:
        return await self.db.read(prime.environment_names, team_id, ids)

    async def prime_create_run(self, team_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        return await self.db.write(prime.create_run, team_id, fields, time.time())

    async def prime_update_run(
        self, run: dict[str, Any], config: dict[str, Any] | None, summary: dict[str, Any] | None
    ) -> None:
        await self.db.write(prime.update_run, run["seq"], config, summary, time.time())

    async def prime_close_run(
        self,
        run: dict[str, Any],
        status: str,
        error: str | None,
        summary: dict[str, Any] | None,
        *,
        repeat_ok: bool,
    ) -> dict[str, Any]:
        def write(conn: Connection) -> bool:
            return prime.close_run(
                conn, run["seq"], status, error, summary, time.time(), repeat_ok=repeat_ok
            )

        await self.db.write(write)
        return await self._reread(run)

    async def prime_metric_row(
        self,
        run_seq: int,
        key: str,
        step: int | None,
        values: dict[str, float],
        ts: float | None,
    ) -> dict[str, Any]:
        return await self.db.write(
            prime.ingest_metric_row, run_seq, key, step, values, ts, time.time()
        )

    async def prime_add_object(
        self,
        run_seq: int,
        kind: str,
        step: int | None,
        blob_key: str,
        nbytes: int,
        rows: int,
        receipt: tuple[str, dict[str, Any]] | None,
    ) -> bool:
        return await self.db.write(
            prime.add_object, run_seq, kind, step, blob_key, nbytes, rows, receipt, time.time()
        )

    async def prime_objects(
        self, run_seq: int, kind: str, step: int | None = None
    ) -> list[dict[str, Any]]:
        return await self.db.read(prime.list_objects, run_seq, kind, step)

    async def prime_upload_receipt(self, run_seq: int, key: str) -> dict[str, Any] | None:
        return await self.db.read(prime.upload_receipt, run_seq, key)

    async def prime_put_upload_receipt(
        self, run_seq: int, key: str, receipt: dict[str, Any]
    ) -> None:
        await self.db.write(prime.put_upload_receipt, run_seq, key, receipt, time.time())

    # -- rollouts: search, record locations, reward distributions, step times (issue 14) ----

    async def search_cursor(self) -> int:
        return await self.db.read(search.indexed_seq)

    async def search_pending(self, after_seq: int, limit: int) -> list[dict[str, Any]]:
        return await self.db.read(search.pending, after_seq, limit)

    async def index_documents(self, expected: int, new: int, docs: list[search.Document]) -> bool:
        return await self.db.write(search.add_documents, expected, new, docs)

    async def search(self, run_seq: int, query: Any, **filters: Any) -> list[dict[str, Any]]:
        return await self.db.read(lambda conn: search.search(conn, run_seq, query, **filters))

    async def search_progress(self, run_seq: int) -> dict[str, int]:
        return await self.db.read(search.run_progress, run_seq)

    async def locations(self, run_seq: int, ids: list[str]) -> dict[str, dict[str, Any]]:
        return await self.db.read(search.locations, run_seq, ids)

    async def places(self, seqs: list[int]) -> dict[int, dict[str, Any]]:
        return await self.db.read(search.places, seqs)

    async def step_rewards(
        self, run_seq: int, stream: str, step: int, **query: Any
    ) -> dict[str, Any]:
        return await self.db.read(
            lambda conn: rewards.step_rewards(conn, run_seq, stream, step, **query)
        )

    async def reward_quantiles(
        self,
        run_seq: int,
        stream: str,
        step_min: int | None,
        step_max: int | None,
        max_points: int,
        kind: str | None = None,
    ) -> dict[str, list[Any]]:
        return await self.db.read(
            rewards.reward_quantiles, run_seq, stream, step_min, step_max, max_points, kind
        )

    async def timeline(self, run_seq: int, points: int) -> dict[str, list[Any]]:
        return await self.db.read(timeline.timeline, run_seq, points)
