"""SQL helpers: upserts (spelled differently by SQLite and PostgreSQL) and a fast executemany."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table

__all__ = ["executemany", "insert_ignore", "upsert"]


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
    """INSERT ... ON CONFLICT DO NOTHING."""
    return _insert(conn, table).on_conflict_do_nothing()


def executemany(conn: Connection, stmt: Any, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """
    Run an INSERT for every row of `rows` (tuples in `columns` order), handing the rows to the
    driver directly: SQLAlchemy's per-row parameter processing costs several times SQLite's own
    insert, and metric uploads insert hundreds of thousands of rows.
    """
    if not rows:
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
