"""
The SQL that SQLite and PostgreSQL spell differently, in one place. Everything else in the
store is portable SQLAlchemy Core and goes through these helpers where it must:

- `upsert` / `insert_ignore`: INSERT ... ON CONFLICT. A row that must be unique across
  replicas (receipts, metric keys, the server secret) is written with one of these, so that a
  second writer changes nothing instead of failing.
- `executemany`: bulk inserts handed to the driver without SQLAlchemy's per-row work (on
  PostgreSQL, COPY into a staging table, then one INSERT ... SELECT).
- `driver_rows`: a read built once, compiled once for the dialect, its rows as the driver's
  tuples, without SQLAlchemy's per-statement work (the chart reads' ~6 statements a series).
- `lock_run`: serializes the writes of one run across every replica for the rest of the
  transaction (a no-op on SQLite, where one writer does everything). A write that reads rows
  it then rewrites (block summaries, a receipt check, a summary merge) takes it first. It
  then checks that the run still exists: an upload that read the run before it was deleted
  (store/deletion.py) gets a 404 and stores nothing.
- `lock_migrations`: one replica at a time migrates the schema.
- `among`: a column matched to any of a list of values, as `= ANY(array)` on PostgreSQL and
  IN lists on SQLite.
- `unindexed`: a column as a term no index may serve (`+col`; PostgreSQL reads it as the
  column). SQLite plans without statistics, and given an ORDER BY that some index walks it
  takes that index over the whole run rather than seek a step's few rows and sort them.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

from sqlalchemy import Connection, Dialect, Table, any_, bindparam, column, func, select
from sqlalchemy import table as sql_table
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import ColumnElement, UnaryExpression
from sqlalchemy.sql.operators import custom_op

from ..errors import not_found
from .schema import runs

__all__ = [
    "among",
    "driver_rows",
    "executemany",
    "insert_ignore",
    "lock_migrations",
    "lock_run",
    "unindexed",
    "upsert",
]

_PG_COPY_ROWS = 2_000
_IN_CHUNK = 500  # values of one IN list (SQLite allows 32,766 parameters a statement)

# pg_advisory_xact_lock keys: (namespace, run seq) for runs; one bigint for migrations (the
# one- and two-key forms never conflict with each other).
_RUN_LOCKS = 0x6F72  # "or"
_MIGRATION_LOCK = 0x6F70656E72756E73  # "openruns"


def _insert(dialect: str, table: Table) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def upsert(conn: Connection, table: Table, keys: tuple[str, ...], updates: tuple[str, ...]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET each of `updates` to the new row's value."""
    return _upsert(conn.dialect.name, table, keys, updates)


@functools.cache  # statements are immutable; one of each, so that executemany's cache hits
def _upsert(dialect: str, table: Table, keys: tuple[str, ...], updates: tuple[str, ...]) -> Any:
    stmt = _insert(dialect, table)
    return stmt.on_conflict_do_update(
        index_elements=list(keys), set_={c: stmt.excluded[c] for c in updates}
    )


def insert_ignore(conn: Connection, table: Table) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING (any unique constraint). On PostgreSQL a conflicting
    row another transaction is still writing makes this wait for it, then do nothing."""
    return _insert_ignore(conn.dialect.name, table)


@functools.cache
def _insert_ignore(dialect: str, table: Table) -> Any:
    return _insert(dialect, table).on_conflict_do_nothing()


def among(conn: Connection, col: ColumnElement[Any], values: list[Any]) -> list[Any]:
    """WHERE clauses that together match `col` to any of `values`, for a query each. On
    PostgreSQL one: `col = ANY(array)`, one parameter (an IN list of 500 made the query too
    long for psycopg's cache of converted queries, and SQLAlchemy rendered a placeholder per
    value: half of an episode upload's index lookups). SQLite: IN lists of _IN_CHUNK."""
    if not values:
        return []
    if conn.dialect.name == "postgresql":
        return [col == any_(bindparam(None, values, type_=ARRAY(col.type)))]
    return [col.in_(values[i : i + _IN_CHUNK]) for i in range(0, len(values), _IN_CHUNK)]


def unindexed(col: ColumnElement[Any]) -> ColumnElement[Any]:
    return UnaryExpression(col, operator=custom_op("+"), type_=col.type)


def lock_run(conn: Connection, run_seq: int, check: bool = True) -> None:
    """Hold the run's write lock until the transaction ends (PostgreSQL; SQLite needs none),
    then (`check`) 404 unless the run still exists: it may have been deleted since the
    caller read it."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s, %s)", (_RUN_LOCKS, run_seq))
    if check and conn.execute(select(runs.c.id).where(runs.c.seq == run_seq)).first() is None:
        raise not_found("the run was deleted while this request was under way")


def lock_migrations(conn: Connection) -> None:
    """Hold the migration lock until the transaction ends (SQLite: BEGIN IMMEDIATE does)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))


def executemany(
    conn: Connection, stmt: Any, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    """
    Run an INSERT for every row of `rows` (tuples in `columns` order), handing the rows to the
    driver directly: SQLAlchemy's per-row parameter processing costs several times SQLite's own
    insert, and metric uploads insert hundreds of thousands of rows. On PostgreSQL the rows go
    in one statement (see _pg_insert_many), not one per row. (Rows of one call must not
    repeat a conflict key: PostgreSQL refuses to update a row twice in one statement.)
    """
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _pg_insert_many(conn, stmt, columns, rows)
        return
    sql, order = _compiled(stmt, columns, conn.dialect)
    params: list[Any]
    if order is None:
        params = [dict(zip(columns, row, strict=True)) for row in rows]
    elif order == list(range(len(columns))):
        params = rows
    else:
        params = [tuple(row[i] for i in order) for row in rows]
    conn.exec_driver_sql(sql, params)


def driver_rows(conn: Connection, stmt: Any, params: dict[str, Any]) -> list[Any]:
    """The rows of `stmt` (a statement built once, at import) with `params`, as the driver's
    tuples: compiled once for the dialect, run on the driver's cursor in the connection's
    transaction. A chart read of 160 series runs ~1,000 such statements; SQLAlchemy's work
    for each (its cache key, the parameters, the result) cost more than SQLite's own, and its
    `exec_driver_sql` saved little of it (the store's read of 20 runs x 8 keys: 112-139 ms
    through SQLAlchemy, 91-123 here). The driver's errors are raised as SQLAlchemy's, so the
    store's translations hold (a read stopped at the query timeout is a 503)."""
    sql, order, defaults = _read_sql(stmt, conn.dialect)
    values = {**defaults, **params}
    args = values if order is None else tuple(values[name] for name in order)
    if not conn.in_transaction():
        conn.begin()  # as SQLAlchemy's first statement would: the reads see one snapshot
    dbapi = conn.dialect.loaded_dbapi
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, args)
        return list(cursor.fetchall())
    except dbapi.Error as exc:
        raise DBAPIError.instance(sql, args, exc, dbapi.Error) from exc
    finally:
        cursor.close()


@functools.lru_cache(maxsize=64)
def _read_sql(stmt: Any, dialect: Dialect) -> tuple[str, tuple[str, ...] | None, dict[str, Any]]:
    """`stmt`'s SQL, the names of its positional parameters in order (None: named), and the
    values of those it binds itself (a literal, a default OFFSET)."""
    compiled = stmt.compile(dialect=dialect)
    assert not compiled.post_compile_params, "an expanding IN is compiled per call"
    order = tuple(compiled.positiontup or ()) if compiled.positional else None
    return compiled.string, order, dict(compiled.params)


@functools.lru_cache(maxsize=64)
def _compiled(
    stmt: Any, columns: tuple[str, ...], dialect: Dialect
) -> tuple[str, list[int] | None]:
    """`stmt`'s SQL for rows of `columns`, and where each positional parameter is in a row
    (None: named parameters)."""
    compiled = stmt.compile(dialect=dialect, column_keys=list(columns))
    if not compiled.positional:
        return compiled.string, None
    return compiled.string, [columns.index(name) for name in compiled.positiontup or ()]


def _pg_insert_many(
    conn: Connection, stmt: Any, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    """Small batches: one INSERT ... SELECT FROM unnest(arrays). Large ones: COPY into a
    temporary staging table, then one INSERT ... SELECT from it (COPY parses rows ~5x faster
    than array parameters). Either way the statement's ON CONFLICT clause is kept."""
    table = stmt.table
    if len(rows) < _PG_COPY_ROWS:
        values = [list(column) for column in zip(*rows, strict=True)]
        params = dict(zip((f"_{c}" for c in columns), values, strict=True))
        conn.exec_driver_sql(_unnest_sql(stmt, columns, conn.dialect), params)
        return
    quote = conn.dialect.identifier_preparer.quote  # "offset" is a column, and a keyword
    names = ", ".join(map(quote, columns))
    # A stage of these columns only, without the table's NOT NULLs (LIKE would copy them, and
    # a column left to its default, as a serial key, would be NULL in the stage).
    stage = f"openruns_stage_{table.name}_{zlib.crc32(names.encode()):08x}"
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "
        f"SELECT {names} FROM {table.name} WITH NO DATA"
    )
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {stage} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    source = sql_table(stage, *(column(c) for c in columns))
    bulk = stmt.from_select(list(columns), select(*(source.c[c] for c in columns)))
    conn.execute(bulk)
    conn.exec_driver_sql(f"TRUNCATE {stage}")  # a second call in this transaction starts empty


@functools.lru_cache(maxsize=64)
def _unnest_sql(stmt: Any, columns: tuple[str, ...], dialect: Dialect) -> str:
    """`stmt` as INSERT ... SELECT FROM unnest(one array a column), its arrays sent in binary
    (psycopg's `%(name)b`): in text, every bytea of a chunk went out hex-escaped, quoted and
    regex-escaped in Python, for PostgreSQL to parse back (docs/benchmarks.md, "PostgreSQL's
    array parameters in binary")."""
    table = stmt.table
    arrays = [bindparam(f"_{c}", type_=ARRAY(table.c[c].type)) for c in columns]
    source: Any = func.unnest(*arrays).table_valued(*columns).render_derived(name="src")
    bulk = stmt.from_select(list(columns), select(*(source.c[c] for c in columns)))
    sql: str = bulk.compile(dialect=dialect).string
    for c in columns:
        placeholder = f"%(_{c})s::"
        assert placeholder in sql, placeholder  # psycopg's casts, as SQLAlchemy renders them
        sql = sql.replace(placeholder, f"%(_{c})b::")
    return sql
