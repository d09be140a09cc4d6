"""
The database connection layer: SQLite (one file, the default) or PostgreSQL (shared by
replicas). Writers and readers on thread pools, migrations at open, errors as 503s.

    db = Database.open("sqlite:////data/openruns.db")      # or postgresql+psycopg://...
    n = await db.read(lambda conn: conn.execute(query).scalar())
    await db.write(insert_rows, rows)          # fn(conn, *args) inside one transaction
    db.close()

Each call runs `fn` in its own transaction on a thread of its pool, off the event loop.

- SQLite: one writer thread (`BEGIN IMMEDIATE`, so a transaction never has to upgrade a read
  lock and fail with SQLITE_BUSY half-way) and 4 readers, each read with a time limit
  (progress handler). WAL mode with synchronous=FULL: a committed transaction is on disk, which
  is what a 2xx promises.
- PostgreSQL: `pool_size` writers and as many readers, READ COMMITTED. Concurrent writers,
  here and on other replicas, are kept correct by the SQL itself (sql.py: insert-or-ignore,
  upserts, `lock_run`), never by this process. Reads carry `statement_timeout`.

A call that waited `pool_timeout` seconds for a connection, a database that cannot be reached,
a query past its time limit and a write that lost a race answer 503 + Retry-After with a
message naming the database (errors.overloaded), never a 500. A full disk (SQLite's "database
or disk is full", PostgreSQL's disk_full) answers 507 + Retry-After: the transaction was rolled
back, reads go on, and the next write succeeds once space is freed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ..errors import ApiError, bad_request, insufficient_storage, overloaded

__all__ = ["Database", "describe_url"]

T = TypeVar("T")
P = ParamSpec("P")

SQLITE_READERS = 4
BUSY_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 5
# Writes on PostgreSQL get a generous bound too, so a stuck lock cannot hold a slot forever.
WRITE_TIMEOUT_S = 120
_PROGRESS_OPS = 20_000


def describe_url(url: str) -> str:
    """The URL with its password hidden, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


class Database:
    """See the module docstring. Thread-safe; `close()` is idempotent."""

    def __init__(
        self,
        url: str,
        query_timeout: float = 30.0,
        pool_size: int = 8,
        pool_timeout: float = 10.0,
    ):
        self.url = url
        self.dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
        self.query_timeout = query_timeout
        self.pool_timeout = pool_timeout
        writers = 1 if self.dialect == "sqlite" else max(1, pool_size)
        readers = SQLITE_READERS if self.dialect == "sqlite" else max(1, pool_size)
        self.writer = self._engine(url, writers, writer=True)
        self.reader = self._engine(url, readers, writer=False)
        self._write_pool = ThreadPoolExecutor(writers, thread_name_prefix="openruns-db-writer")
        self._read_pool = ThreadPoolExecutor(readers, thread_name_prefix="openruns-db-read")
        self._sizes = {"write": writers, "read": readers}
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        url: str,
        query_timeout: float = 30.0,
        pool_size: int = 8,
        pool_timeout: float = 10.0,
    ) -> Database:
        """Connect and bring the schema to the newest migration (exceptions as raised by the
        driver: the caller words the startup error)."""
        from .migrate import upgrade

        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        db = cls(url, query_timeout, pool_size, pool_timeout)
        try:
            with db.writer.begin() as conn:
                upgrade(conn)
        except BaseException:
            db.close()
            raise
        return db

    # The door to the database: `fn(conn, *args, **kwargs)` in one transaction, its arguments
    # checked by mypy against `fn` itself (issue 23).
    async def write(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._wait("write", _bind(fn, args, kwargs))

    def write_sync(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return self._submit("write", _bind(fn, args, kwargs)).result()

    async def read(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._wait("read", _bind(fn, args, kwargs))

    def read_sync(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return self._submit("read", _bind(fn, args, kwargs)).result()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._write_pool.shutdown(wait=True, cancel_futures=True)
        self._read_pool.shutdown(wait=True, cancel_futures=True)
        self.writer.dispose()
        self.reader.dispose()

    def _submit(self, kind: str, fn: Callable[[Connection], T]) -> Future[T]:
        pool = self._write_pool if kind == "write" else self._read_pool
        try:
            return pool.submit(self._call, kind, fn)
        except RuntimeError:  # the store was closed, or the interpreter is exiting
            raise overloaded(
                "the server is shutting down: its database connections are closed",
                code="shutting_down",
            ) from None

    async def _wait(self, kind: str, fn: Callable[[Connection], T]) -> T:
        """fn's result; 503 when no connection came free within pool_timeout. A call that has
        started is never abandoned (its transaction may be committing): only a queued one."""
        future = self._submit(kind, fn)
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), self.pool_timeout
            )
        except TimeoutError:
            if not future.cancel():  # running (or done) after all: wait for it
                return await asyncio.wrap_future(future)
        raise overloaded(
            f"the database is saturated: all {self._sizes[kind]} {kind} connections of this "
            f"server stayed busy for {self.pool_timeout:g} s; retry shortly",
            retry_after=2,
            code="database_pool_exhausted",
        )

    def _call(self, kind: str, fn: Callable[[Connection], T]) -> T:
        try:
            if kind == "write":
                with self.writer.begin() as conn:
                    return fn(conn)
            with self.reader.connect() as conn:
                return self._timed_read(conn, fn)
        except IntegrityError as exc:
            # Only a concurrent write of the same row (another replica, or a retried request
            # racing its first attempt) gets here; a retry finds what the winner stored.
            raise overloaded(
                "a concurrent write of the same data won; retry", code="write_conflict"
            ) from exc
        except PoolTimeout as exc:
            raise overloaded(
                "the database is saturated: no connection came free; retry shortly",
                retry_after=2,
                code="database_pool_exhausted",
            ) from exc
        except DBAPIError as exc:
            raise self._translate(exc) from exc

    def _timed_read(self, conn: Connection, fn: Callable[[Connection], T]) -> T:
        raw = conn.connection.dbapi_connection if self.dialect == "sqlite" else None
        if not isinstance(raw, sqlite3.Connection):
            return fn(conn)  # PostgreSQL: statement_timeout, set at connect
        deadline = time.monotonic() + self.query_timeout
        raw.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_OPS)
        try:
            return fn(conn)
        finally:
            raw.set_progress_handler(None, 0)

    def _translate(self, exc: DBAPIError) -> Exception:
        """A 503 for what a retry may fix, a 400 for a value the database cannot store (NUL
        in PostgreSQL text); anything else is a bug and stays itself."""
        if self.dialect == "sqlite":
            text = str(exc.orig)
            # SQLITE_FULL: the disk (or a quota) is full; the transaction was rolled back.
            if isinstance(exc, OperationalError) and "database or disk is full" in text:
                return insufficient_storage(f"the database {describe_url(self.url)}")
            if isinstance(exc, OperationalError) and "interrupted" in text:
                return _query_timeout()
            if isinstance(exc, OperationalError) and ("locked" in text or "busy" in text):
                return overloaded("the database is busy; retry shortly", code="database_busy")
            return exc
        state = getattr(exc.orig, "sqlstate", None) or ""
        reason = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else "gone"
        if isinstance(exc, DataError) or state.startswith("22"):
            return bad_request("invalid_value", f"a value cannot be stored: {reason}")
        if state == "57014":
            return _query_timeout()
        if state == "53100":  # disk_full
            return insufficient_storage(f"the database {describe_url(self.url)}")
        if state in ("40P01", "40001", "55P03"):  # deadlock, serialization, lock not available
            return overloaded("the database is busy; retry shortly", code="database_busy")
        lost = isinstance(exc, OperationalError | InterfaceError) and not state
        if exc.connection_invalidated or lost or state[:2] in ("08", "53", "57"):
            return overloaded(
                f"the database {describe_url(self.url)} is unavailable ({reason}); retry shortly",
                retry_after=5,
                code="database_unavailable",
            )
        return exc

    def _engine(self, url: str, pool_size: int, writer: bool) -> Engine:
        if self.dialect != "sqlite":
            timeout_ms = int(1000 * (WRITE_TIMEOUT_S if writer else self.query_timeout))
            return create_engine(
                url,
                pool_size=pool_size,
                max_overflow=0,
                pool_timeout=self.pool_timeout,
                pool_pre_ping=True,
                pool_recycle=1800,
                connect_args={
                    "connect_timeout": CONNECT_TIMEOUT_S,
                    "options": f"-c statement_timeout={timeout_ms}",
                    "application_name": "openruns-server",
                    # No server-side prepared statements: after five runs psycopg prepares a
                    # statement, and PostgreSQL's generic plan then tests `name IN ($1..$500)`
                    # row by row (a 10,001-key upload spent 4.5 of its 6.7 s in 21 key
                    # lookups of 210 ms each; with a plan per call, 4 ms each).
                    "prepare_threshold": None,
                },
            )
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
            _journal_in_wal(cur)
            for pragma in (
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


def _journal_in_wal(cur: sqlite3.Cursor) -> None:
    """Put the file in WAL mode. On a new file opened by several connections at once, the
    switch can answer "database is locked" at once, without waiting on the busy handler (SQLite
    refuses a lock upgrade that could deadlock): try again until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _query_timeout() -> ApiError:
    return overloaded("the query took too long and was stopped", code="query_timeout")


def _bind(
    fn: Callable[Concatenate[Connection, P], T], args: Any, kwargs: Any
) -> Callable[[Connection], T]:
    """`fn` with its arguments after the connection bound (checked at the door's signature)."""
    return lambda conn: fn(conn, *args, **kwargs)
