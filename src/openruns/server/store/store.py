"""
Store: the server's one door to its metadata, and the reads and writes that are more than
one SQL function.

    store = Store.open(settings.sqlalchemy_url(), heartbeat_timeout=300)
    run, created = await store.create_run("team", {"id": ..., "kind": "eval"}, None)
    await store.ingest_metrics(run["seq"], key, [(rows, points)])
    keys = await store.read(metric_reads.key_stats, run["seq"])     # one SQL function
    store.close()

Every call is one transaction (db.py). The SQL lives in the modules next to this one, one per
concern; a caller that needs one SQL function calls it through the door, `store.read(fn,
*args)` / `store.write(fn, *args)`, its arguments checked by mypy against `fn` itself (issue
23). The methods here are what the door alone cannot say: several SQL steps in one
transaction, the receipts, and the crash rule. A run that is running but silent past the
heartbeat timeout is marked crashed when it is read (`get_run`, `list_runs`, `create_run`'s
replay), as well as by the server's periodic sweep, so the rule holds whichever replica
answers; runs read through the door are not checked.

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

from . import episodes, keys, logs, metrics, prime, runs
from .annotations import add as add_annotations
from .db import Database
from .receipts import get_receipt, put_receipt
from .rows import ListedRun, RunRow
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
    # transaction, its arguments checked against `fn` itself. Every caller of a single SQL
    # function comes in here; the methods below sequence several functions or add a rule.

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
    ) -> tuple[RunRow, bool]:
        run, created = await self.db.write(
            runs.create_run, team_id, fields, create_key, time.time(), ids_per_team
        )
        if not created:
            run = await self._fresh(run)
        return run, created

    async def get_run(self, run_id: str, team_id: str | None = None) -> RunRow | None:
        """Run `run_id` of `team_id` (None: of any team, the first made with that id)."""
        run = await self.db.read(runs.get_run, run_id, team_id)
        return await self._fresh(run) if run is not None else None

    async def list_runs(self, **filters: Any) -> list[ListedRun]:
        page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        now = time.time()
        if any(runs.stale_error(r, now, self.heartbeat_timeout, self.started_at) for r in page):
            await self.sweep()
            page = await self.db.read(lambda conn: runs.list_runs(conn, **filters))
        return page

    async def patch_run(self, run: RunRow, changes: dict[str, Any]) -> RunRow:
        await self.db.write(runs.patch_run, run["seq"], changes, time.time())
        return await self._reread(run)

    async def finish_run(
        self,
        run: RunRow,
        status: str,
        error: str | None,
        changes: dict[str, Any],
        times: dict[str, float] | None = None,
    ) -> RunRow:
        """`times`: the run's own finished_at / last_heartbeat_at (a run uploaded later)."""
        await self.db.write(
            runs.finish_run, run["seq"], status, error, changes, time.time(), times or {}
        )
        return await self._reread(run)

    async def sweep(self) -> int:
        """Mark every run silent past the heartbeat timeout as crashed."""
        return await self.db.write(
            runs.crash_stale, time.time(), self.heartbeat_timeout, None, self.started_at
        )

    async def _fresh(self, run: RunRow) -> RunRow:
        if runs.stale_error(run, time.time(), self.heartbeat_timeout, self.started_at) is None:
            return run
        await self.db.write(
            runs.crash_stale, time.time(), self.heartbeat_timeout, run["seq"], self.started_at
        )
        return await self._reread(run)

    async def _reread(self, run: RunRow) -> RunRow:
        fresh = await self.db.read(runs.get_run_by_seq, run["seq"])
        assert fresh is not None  # runs are never deleted
        return fresh

    # -- bulk uploads -----------------------------------------------------------------------

    async def ingest_metrics(
        self,
        run_seq: int,
        key: str,
        chunks: Iterable[tuple[int, metrics.MetricPoints | metrics.MetricColumns]],
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
            touched = metrics.Touched()
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

    # -- the Prime wire (server/prime/; SQL in prime.py) ------------------------------------

    async def prime_close_run(
        self,
        run: RunRow,
        status: str,
        error: str | None,
        summary: dict[str, Any] | None,
        *,
        repeat_ok: bool,
    ) -> RunRow:
        def write(conn: Connection) -> bool:
            return prime.close_run(
                conn, run["seq"], status, error, summary, time.time(), repeat_ok=repeat_ok
            )

        await self.db.write(write)
        return await self._reread(run)
