"""
Store: every metadata read and write the server makes, as awaitable methods.

    store = Store.open(settings.database_url, heartbeat_timeout=300)
    run, created = await store.create_run("team", {"id": ..., "kind": "eval"}, None)
    await store.ingest_metrics(run["seq"], key, points, rows=10)
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
from typing import Any

from sqlalchemy import Connection

from . import episodes, keys, metrics, runs
from .db import Database
from .receipts import get_receipt, put_receipt
from .sql import lock_run

__all__ = ["Store"]


class Store:
    def __init__(self, db: Database, heartbeat_timeout: float):
        self.db = db
        self.heartbeat_timeout = heartbeat_timeout
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

    # -- runs -------------------------------------------------------------------------------

    async def create_run(
        self, team_id: str, fields: dict[str, Any], create_key: str | None
    ) -> tuple[dict[str, Any], bool]:
        run, created = await self.db.write(
            runs.create_run, team_id, fields, create_key, time.time()
        )
        if not created:
            run = await self._fresh(run)
        return run, created

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        run = await self.db.read(runs.get_run, run_id)
        return await self._fresh(run) if run is not None else None

    async def list_runs(self, **filters: Any) -> list[dict[str, Any]]:
        page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        now = time.time()
        if any(runs.stale_error(r, now, self.heartbeat_timeout) for r in page):
            await self.sweep()
            page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        return page

    async def patch_run(self, run: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
        await self.db.write(runs.patch_run, run["seq"], changes, time.time())
        return await self._reread(run)

    async def finish_run(
        self, run: dict[str, Any], status: str, error: str | None, changes: dict[str, Any]
    ) -> dict[str, Any]:
        await self.db.write(runs.finish_run, run["seq"], status, error, changes, time.time())
        return await self._reread(run)

    async def heartbeat(self, run: dict[str, Any]) -> str:
        return await self.db.write(runs.heartbeat, run["seq"], time.time())

    async def sweep(self) -> int:
        """Mark every run silent past the heartbeat timeout as crashed."""
        return await self.db.write(runs.crash_stale, time.time(), self.heartbeat_timeout)

    async def _fresh(self, run: dict[str, Any]) -> dict[str, Any]:
        if runs.stale_error(run, time.time(), self.heartbeat_timeout) is None:
            return run
        await self.db.write(runs.crash_stale, time.time(), self.heartbeat_timeout, run["seq"])
        return await self._reread(run)

    async def _reread(self, run: dict[str, Any]) -> dict[str, Any]:
        fresh = await self.db.read(runs.get_run, run["id"])
        assert fresh is not None  # runs are never deleted
        return fresh

    # -- keys -------------------------------------------------------------------------------

    async def team_of_key(self, key: str) -> tuple[int, str] | None:
        return await self.db.read(keys.team_of_key, key)

    # -- bulk uploads -----------------------------------------------------------------------

    async def receipt(self, run_seq: int, kind: str, key: str) -> dict[str, Any] | None:
        return await self.db.read(get_receipt, run_seq, kind, key)

    async def ingest_metrics(
        self,
        run_seq: int,
        key: str,
        points: dict[tuple[str, int], tuple[float, float | None]],
        rows: int,
    ) -> dict[str, Any]:
        """Merge the points and store the receipt, unless `key` was stored already."""

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, "metrics", key)
            if prior is not None:
                return prior
            metrics.write_points(conn, run_seq, points)
            receipt = {"status": "committed", "rows": rows, "receipt": key}
            put_receipt(conn, run_seq, "metrics", key, receipt, time.time())
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
    ) -> dict[str, Any]:
        """Index a segment already durable in the blob store, with its receipt, unless `key` was
        stored already (then the blob just written stays unreferenced)."""

        def write(conn: Connection) -> dict[str, Any]:
            lock_run(conn, run_seq)
            prior = get_receipt(conn, run_seq, "episodes", key)
            if prior is not None:
                return prior
            now = time.time()
            episodes.add_segment(conn, run_seq, stream, blob_key, nbytes, index, now)
            receipt = {"status": "committed", "records": len(index), "receipt": key}
            put_receipt(conn, run_seq, "episodes", key, receipt, now)
            return receipt

        return await self.db.write(write)

    # -- reads ------------------------------------------------------------------------------

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

    async def metric_key_ids(self, run_seq: int) -> list[tuple[str, int]]:
        return await self.db.read(metrics.run_keys, run_seq)

    async def metric_points(
        self, key_id: int, after_step: int, limit: int
    ) -> list[tuple[int, float, float | None]]:
        return await self.db.read(metrics.points_page, key_id, after_step, limit)

    async def steps(
        self, run_seq: int, stream: str, step_min: int | None = None
    ) -> list[dict[str, Any]]:
        return await self.db.read(episodes.steps, run_seq, stream, step_min)

    async def list_episodes(
        self, run_seq: int, **query: Any
    ) -> tuple[list[dict[str, Any]], tuple[Any, int] | None]:
        return await self.db.read(lambda conn: episodes.list_episodes(conn, run_seq, **query))

    async def locate_episode(self, run_seq: int, episode_id: str) -> dict[str, Any] | None:
        return await self.db.read(episodes.locate, run_seq, episode_id)

    async def episode_page(
        self, run_seq: int, stream: str, after_seq: int, limit: int
    ) -> list[dict[str, Any]]:
        return await self.db.read(episodes.page_for_export, run_seq, stream, after_seq, limit)

    async def segment_keys(self, run_seq: int, stream: str) -> list[str]:
        return await self.db.read(episodes.segment_keys, run_seq, stream)
