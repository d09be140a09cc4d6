"""
The SQL that SQLite and PostgreSQL spell differently, in one place. Everything else in the
store is portable SQLAlchemy Core and goes through these helpers where it must:

- `upsert` / `insert_ignore`: INSERT ... ON CONFLICT. A row that must be unique across
  replicas (receipts, metric keys, the server secret) is written with one of these, so that a
  second writer changes nothing instead of failing.
- `executemany`: bulk inserts handed to the driver without SQLAlchemy's per-row work (on
  PostgreSQL, one INSERT ... SELECT FROM unnest(arrays) per chunk of rows).
- `lock_run`: serializes the writes of one run across every replica for the rest of the
  transaction (a no-op on SQLite, where one writer does everything). A write that reads rows
  it then rewrites (block summaries, a receipt check, a summary merge) takes it first.
- `lock_migrations`: one replica at a time migrates the schema.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY

__all__ = ["executemany", "insert_ignore", "lock_migrations", "lock_run", "upsert"]

_PG_CHUNK_ROWS = 50_000

# pg_advisory_xact_lock keys: (namespace, run seq) for runs; one bigint for migrations (the
# one- and two-key forms never conflict with each other).
_RUN_LOCKS = 0x6F72  # "or"
_MIGRATION_LOCK = 0x6F70656E72756E73  # "openruns"


def _insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def upsert(conn: Connection, table: Table, keys: tuple[str, ...], updates: tuple[str, ...]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET each of `updates` to the new row's value."""
    stmt = _insert(conn, table)
    return stmt.on_conflict_do_update(
        index_elements=list(keys), set_={c: stmt.excluded[c] for c in updates}
    )


def insert_ignore(conn: Connection, table: Table) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING (any unique constraint). On PostgreSQL a conflicting
    row another transaction is still writing makes this wait for it, then do nothing."""
    return _insert(conn, table).on_conflict_do_nothing()


def lock_run(conn: Connection, run_seq: int) -> None:
    """Hold the run's write lock until the transaction ends (PostgreSQL; SQLite needs none)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s, %s)", (_RUN_LOCKS, run_seq))


def lock_migrations(conn: Connection) -> None:
    """Hold the migration lock until the transaction ends (SQLite: BEGIN IMMEDIATE does)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))


def executemany(conn: Connection, stmt: Any, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """
    Run an INSERT for every row of `rows` (tuples in `columns` order), handing the rows to the
    driver directly: SQLAlchemy's per-row parameter processing costs several times SQLite's own
    insert, and metric uploads insert hundreds of thousands of rows. On PostgreSQL the rows go
    as one array per column into `INSERT ... SELECT FROM unnest(...)`, the statement's ON
    CONFLICT clause kept: one statement per chunk instead of one per row. (Rows of one call
    must not repeat a conflict key: PostgreSQL refuses to update a row twice in a statement.)
    """
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _unnest_insert(conn, stmt, columns, rows)
        return
    compiled = stmt.compile(dialect=conn.dialect, column_keys=list(columns))
    params: list[Any]
    if compiled.positional:
        order = [columns.index(name) for name in compiled.positiontup]
        if order == list(range(len(columns))):
            params = rows
        else:
            params = [tuple(row[i] for i in order) for row in rows]
    else:
        params = [dict(zip(columns, row, strict=True)) for row in rows]
    conn.exec_driver_sql(compiled.string, params)


def _unnest_insert(
    conn: Connection, stmt: Any, columns: tuple[str, ...], rows: list[tuple]
) -> None:
    table = stmt.table
    arrays = [bindparam(f"_{c}", type_=ARRAY(table.c[c].type)) for c in columns]
    source = func.unnest(*arrays).table_valued(*columns).render_derived(name="src")
    bulk = stmt.from_select(list(columns), select(*(source.c[c] for c in columns)))
    compiled = bulk.compile(dialect=conn.dialect)
    for start in range(0, len(rows), _PG_CHUNK_ROWS):
        chunk = rows[start : start + _PG_CHUNK_ROWS]
        arrays = [list(column) for column in zip(*chunk, strict=True)]
        values = dict(zip((f"_{c}" for c in columns), arrays, strict=True))
        conn.exec_driver_sql(compiled.string, values)
