"""
The database connection layer: one writer, a pool of readers, migrations at open.

    db = Database.open("sqlite:////data/openruns.db")
    n = await db.read(lambda conn: conn.execute(query).scalar())
    await db.write(insert_rows, rows)          # fn(conn, *args) inside one transaction
    db.close()

Writes run one at a time on a dedicated thread, each in its own transaction (`BEGIN
IMMEDIATE` on SQLite, so a transaction never has to upgrade a read lock and fail with
SQLITE_BUSY half-way). Reads run on a small thread pool, each on its own connection, with a
time limit (SQLite progress handler). Both keep blocking work off the event loop.
SQLite runs in WAL mode with synchronous=FULL: a committed transaction is on disk, which is
what a 2xx promises (issue 3, "Durability").
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import IntegrityError, OperationalError

from ..errors import overloaded

__all__ = ["Database"]

T = TypeVar("T")

READ_THREADS = 4
BUSY_TIMEOUT_MS = 10_000
_PROGRESS_OPS = 20_000


class Database:
    """See the module docstring. Thread-safe; `close()` is idempotent."""

    def __init__(self, url: str, query_timeout: float = 30.0, read_threads: int = READ_THREADS):
        self.url = url
        self.query_timeout = query_timeout
        self._sqlite = url.startswith("sqlite")
        self.writer = self._engine(url, pool_size=1, writer=True)
        self.reader = self._engine(url, pool_size=read_threads, writer=False)
        self._write_pool = ThreadPoolExecutor(1, thread_name_prefix="openruns-db-writer")
        self._read_pool = ThreadPoolExecutor(read_threads, thread_name_prefix="openruns-db-read")
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str, query_timeout: float = 30.0) -> Database:
        """Connect and bring the schema to the newest migration."""
        from .migrate import upgrade

        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        db = cls(url, query_timeout)
        try:
            db.write_sync(upgrade)
        except BaseException:
            db.close()
            raise
        return db

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._write_pool.submit(self._write, fn, args))

    def write_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return self._write_pool.submit(self._write, fn, args).result()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._read_pool.submit(self._read, fn, args))

    def read_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return self._read_pool.submit(self._read, fn, args).result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._write_pool.shutdown(wait=True, cancel_futures=True)
        self._read_pool.shutdown(wait=True, cancel_futures=True)
        self.writer.dispose()
        self.reader.dispose()

    def _write(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with self.writer.begin() as conn:
                return fn(conn, *args)
        except OperationalError as exc:
            raise _busy(exc) from exc
        except IntegrityError as exc:
            # Only another process writing the same row at the same time (a replica, or a
            # retried request racing its first attempt) gets here: the replay will find it.
            raise overloaded(
                "a concurrent write of the same data won; retry", code="write_conflict"
            ) from exc

    def _read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with self.reader.connect() as conn:
                raw = conn.connection.dbapi_connection if self._sqlite else None
                if isinstance(raw, sqlite3.Connection):
                    deadline = time.monotonic() + self.query_timeout
                    raw.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_OPS)
                try:
                    return fn(conn, *args)
                finally:
                    if isinstance(raw, sqlite3.Connection):
                        raw.set_progress_handler(None, 0)
        except OperationalError as exc:
            raise _busy(exc) from exc

    def _engine(self, url: str, pool_size: int, writer: bool) -> Engine:
        if not self._sqlite:
            return create_engine(url, pool_size=pool_size, max_overflow=0, pool_pre_ping=True)
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=0,
            connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        )
        begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
            # The driver must not open transactions by itself; "begin" below does.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            for pragma in (
                "journal_mode=WAL",
                "synchronous=FULL",
                f"busy_timeout={BUSY_TIMEOUT_MS}",
                "cache_size=-65536",
                "temp_store=MEMORY",
                "foreign_keys=OFF",
            ):
                cur.execute(f"PRAGMA {pragma}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql(begin)

        return engine


def _busy(exc: OperationalError) -> Exception:
    text = str(exc.orig)
    if "interrupted" in text:
        return overloaded("the query took too long and was stopped", code="query_timeout")
    if "locked" in text or "busy" in text:
        return overloaded("the database is busy; retry shortly", code="database_busy")
    return exc
