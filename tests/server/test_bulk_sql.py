"""The store's bulk writes (store/sql.py `executemany`) keep every value exactly, on both stores
and by both of PostgreSQL's routes (one INSERT ... SELECT FROM unnest of binary arrays below
_PG_COPY_ROWS rows, COPY through a staging table from there): bytes of every value (quotes,
backslashes, NUL, `\\x` itself), NULLs among values, floats to their last bit and infinities,
integers past 32 bits, text with quotes, braces, commas and any Unicode, in columns named by
SQL keywords (log_lines.offset: COPY's column list failed on it); and that an upsert's second
write replaces the first's row."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select

from openruns.server.store import sql
from openruns.server.store.schema import log_lines, metric_chunks

ROUTES = ["unnest", "copy"]

AWKWARD_BYTES = [
    b"",
    b"\x00",
    b'"quoted" and \\ backslash',
    b"\\x41\\\\x",
    bytes(range(256)) * 130,  # 33 KB: a chunk's column, past TOAST's threshold
]
AWKWARD_TEXT = [
    "",
    'a "quoted" {brace}, comma',
    "back\\slash \\x00 NULL null",
    "Unicode: \u00e9\u4e2d\U0001f600 \u200b",
    "line\nbreak\ttab",
]


@pytest.fixture(scope="module")
def store(backend, stores_factory, tmp_path_factory):
    opened = stores_factory.new(backend, tmp_path_factory.mktemp("bulk")).open_store()
    yield opened
    opened.close()


@pytest.fixture(params=ROUTES)
def route(request, store, monkeypatch):
    """The PostgreSQL route taken; on SQLite both run the same path (no route of its own)."""
    if request.param == "copy":
        monkeypatch.setattr(sql, "_PG_COPY_ROWS", 1)
    return request.param


def chunk_rows(key_id: int, version: float) -> list[tuple]:
    rows = []
    for i, blob in enumerate(AWKWARD_BYTES):
        value = [version, -0.0, 5e-324, math.inf, -math.inf, 1.7976931348623157e308][i % 6]
        rows.append(
            (key_id, 2**40 + i, 3, value, 1 / 3 + version, -(2**62), 2**62, value,
             blob, blob[::-1], None if i % 2 else blob + b"\\")
        )  # fmt: skip
    return rows


COLUMNS = tuple(c.name for c in metric_chunks.c)


def stored_chunks(store, key_id: int) -> list[tuple]:
    query = select(metric_chunks).where(metric_chunks.c.key_id == key_id)

    def read(conn):
        rows = conn.execute(query.order_by(metric_chunks.c.chunk)).all()
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]

    return store.db.read_sync(read)


def test_bytes_floats_and_big_integers_round_trip_and_an_upsert_replaces(store, route, backend):
    key_id = 1_000 + ROUTES.index(route)
    stmt_of = lambda conn: sql.upsert(conn, metric_chunks, COLUMNS[:2], COLUMNS[2:])  # noqa: E731
    first = chunk_rows(key_id, 0.5)
    store.db.write_sync(lambda conn: sql.executemany(conn, stmt_of(conn), COLUMNS, first))
    assert stored_chunks(store, key_id) == first

    second = chunk_rows(key_id, 0.25)  # the same keys: every row replaced
    store.db.write_sync(lambda conn: sql.executemany(conn, stmt_of(conn), COLUMNS, second))
    stored = stored_chunks(store, key_id)
    assert stored == second
    if backend == "postgres":  # SQLite writes a whole REAL as an integer: -0.0 reads as 0.0
        assert math.copysign(1.0, stored[1][3]) == -1.0


def test_text_with_quotes_braces_and_unicode_round_trips(store, route):
    run_seq = 2_000 + ROUTES.index(route)
    columns = tuple(c.name for c in log_lines.c)
    rows = [
        (run_seq, i, len(line.encode()), 1e9 + i / 7, "stdout", source, line)
        for i, line in enumerate(AWKWARD_TEXT)
        for source in [AWKWARD_TEXT[(i + 1) % len(AWKWARD_TEXT)] or "main"]
    ]
    stmt = sql.insert_ignore
    store.db.write_sync(lambda conn: sql.executemany(conn, stmt(conn, log_lines), columns, rows))
    query = select(log_lines).where(log_lines.c.run_seq == run_seq).order_by(log_lines.c.offset)
    assert store.db.read_sync(lambda conn: [tuple(r) for r in conn.execute(query)]) == rows
