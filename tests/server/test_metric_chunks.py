"""Dense series stored as chunks of packed columns (store/metric_chunks.py), on both stores:
where points land, that every reader sees rows and chunks as one series (exactly one value
per step, the last written), and that deleting a run leaves no chunk."""

from __future__ import annotations

import itertools
import math

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, select, text

from openruns.server.errors import ApiError
from openruns.server.metric_rows import metric_batches
from openruns.server.store import alerts, metric_chunks, metric_key_ids, metric_reads, timeline
from openruns.server.store import metrics as metric_sql
from openruns.server.store.schema import BLOCK_SIZES, metric_blocks, metric_keys, metric_points
from openruns.server.store.schema import metric_chunks as chunks
from openruns.server.store.sql import executemany
from openruns.server.store.store import Store

from .helpers import api, create_run, database_at, metric_rows, upload
from .test_deletion import rows_left, seq_of
from .test_store import assert_buckets

DENSE = metric_chunks.DENSE_POINTS
CHUNK = metric_chunks.CHUNK_STEPS


@pytest.fixture(scope="module")
def store(backend, stores_factory, tmp_path_factory):
    opened = stores_factory.new(backend, tmp_path_factory.mktemp("store")).open_store()
    yield opened
    opened.close()


_runs = itertools.count(5000)


def write(store, run_seq, points):
    store.db.write_sync(metric_sql.write_points, run_seq, points)


def layout(store, run_seq, name):
    """(rows, {chunk: count}) of a key: where its points are stored."""

    def read(conn):
        key_id = conn.execute(
            select(metric_keys.c.id).where(
                metric_keys.c.run_seq == run_seq, metric_keys.c.name == name
            )
        ).scalar_one()
        rows = conn.execute(
            select(func.count()).where(metric_points.c.key_id == key_id)
        ).scalar_one()
        found = conn.execute(
            select(chunks.c.chunk, chunks.c.count).where(chunks.c.key_id == key_id)
        ).all()
        return rows, dict(found)

    return store.db.read_sync(read)


def everything(store, run_seq, name, page=1000):
    """{step: (value, ts)} of a key read back by export pages."""
    key_id = store.db.read_sync(metric_key_ids.key_ids, run_seq, [name], False)[name]
    out: dict[int, tuple[float, float | None]] = {}
    after = -1
    while batch := store.db.read_sync(metric_reads.points_page, key_id, after, page):
        steps = [s for s, _, _ in batch]
        assert steps == sorted(steps) and steps[0] > after and not set(steps) & set(out)
        out.update((s, (v, ts)) for s, v, ts in batch)
        after = steps[-1]
    return out


def check_reads(store, run_seq, name, truth):
    """Every read of the key agrees with `truth` ({step: (value, ts)}, the last writes)."""
    assert everything(store, run_seq, name) == truth
    # Pages cut inside chunks: small ones, at most ~20 of them (each page is a query).
    assert everything(store, run_seq, name, page=max(7, len(truth) // 20)) == truth
    steps = sorted(truth)
    series, downsampled = store.db.read_sync(
        metric_reads.series, run_seq, [name], 0, metric_sql.MAX_STEP, 0
    )
    assert not downsampled
    assert series[name]["step"] == steps
    assert series[name]["value"] == [truth[s][0] for s in steps]
    # A range cut inside chunks: the edges read from the columns.
    lo, hi = steps[len(steps) // 3], steps[2 * len(steps) // 3]
    inside, _ = store.db.read_sync(metric_reads.series, run_seq, [name], lo, hi, 0)
    assert inside[name]["step"] == [s for s in steps if lo <= s <= hi]
    for max_points in (1, 7, 100, 999):
        check_downsampled(store, run_seq, name, truth, 0, metric_sql.MAX_STEP, max_points)
        check_downsampled(store, run_seq, name, truth, lo, hi, max_points)
    stats = {row["key"]: row for row in store.db.read_sync(metric_reads.step_key_stats, run_seq)}[
        name
    ]
    assert (stats["count"], stats["last_step"], stats["last_value"]) == (
        len(steps),
        steps[-1],
        truth[steps[-1]][0],
    )
    newest = store.db.read_sync(alerts.recent_points, run_seq, [name], 5)[name]
    assert newest == [truth[s] for s in reversed(steps[-5:])]
    newest = store.db.read_sync(alerts.recent_points, run_seq, [name], 10**6)[name]
    assert newest == [truth[s] for s in reversed(steps)]
    check_blocks(store, run_seq, name, truth)


def check_downsampled(store, run_seq, name, truth, lo, hi, max_points):
    points = sorted((s, v) for s, (v, _) in truth.items() if lo <= s <= hi)
    series, downsampled = store.db.read_sync(
        metric_reads.series, run_seq, [name], lo, hi, max_points
    )
    got = series[name]
    if len(points) <= max_points:
        assert not downsampled and got["step"] == [s for s, _ in points]
        return
    assert downsampled and 0 < len(got["step"]) <= max_points
    assert_buckets(got, points)


def check_blocks(store, run_seq, name, truth):
    """Every level's block summaries equal the brute-force ones of the points: levels 2 and up
    as stored; level 1 as read (metric_chunks.level_one), and stored only for the blocks of
    rows, never inside a chunk's range (a chunk's are derived from it)."""

    def read(conn):
        key_id = metric_key_ids.key_ids(conn, run_seq, [name], False)[name]
        b = metric_blocks
        query = select(b.c.level, b.c.block, b.c.count, b.c.min, b.c.max, b.c.last_step,
                       b.c.last_value).where(b.c.key_id == key_id)  # fmt: skip
        stored = {(lv, blk): tuple(rest) for lv, blk, *rest in conn.execute(query)}
        ones = metric_chunks.level_one(conn, key_id, 0, max(truth) // BLOCK_SIZES[0] + 1)
        return stored, ones

    stored, ones = store.db.read_sync(read)
    chunked = set(layout(store, run_seq, name)[1])

    expected = {}
    for level, size in enumerate(BLOCK_SIZES, 1):
        for step in sorted(truth):
            value = truth[step][0]
            key = (level, step // size)
            if key in expected:
                n, lo, hi, _, _ = expected[key]
                expected[key] = (n + 1, min(lo, value), max(hi, value), step, value)
            else:
                expected[key] = (1, value, value, step, value)
    above = {key: summary for key, summary in expected.items() if key[0] > 1}
    assert {key: summary for key, summary in stored.items() if key[0] > 1} == above
    assert ones == [summary for key, summary in sorted(expected.items()) if key[0] == 1]
    per_chunk = CHUNK // BLOCK_SIZES[0]
    of_rows = {
        key: summary
        for key, summary in expected.items()
        if key[0] == 1 and key[1] // per_chunk not in chunked
    }
    assert {key: summary for key, summary in stored.items() if key[0] == 1} == of_rows


def test_a_dense_upload_lands_in_chunks_and_reads_back_exactly(store):
    run_seq = next(_runs)
    steps = range(1000, 1000 + 2 * CHUNK + 500)  # three chunks, the last one partly
    truth = {s: (math.sin(s / 50) * 1e3 + s / 7, 1.7e9 + s / 10) for s in steps}
    write(store, run_seq, {("loss", s): vt for s, vt in truth.items()})
    rows, found = layout(store, run_seq, "loss")
    assert rows == 0
    assert found == {0: CHUNK - 1000, 1: CHUNK, 2: 1000 + 500}
    check_reads(store, run_seq, "loss", truth)
    # An append (the common case) goes on in the chunk; a gap inside a chunk too.
    more = {s: (float(-s), None) for s in itertools.chain(range(3 * CHUNK - 12, 3 * CHUNK + 3))}
    write(store, run_seq, {("loss", s): vt for s, vt in more.items()})
    truth.update(more)
    rows, found = layout(store, run_seq, "loss")
    assert rows == 3 and 3 not in found  # 3 points of a new chunk: rows
    check_reads(store, run_seq, "loss", truth)


def test_the_extent_of_a_range_over_many_chunks_counts_its_edges_and_bounds_the_rest(store):
    """extent(): the first and last chunk of a range are counted point by point (one with gaps,
    one contiguous, rows beside them); the chunks between only up to `up_to`."""
    run_seq = next(_runs)
    dense = [s for s in range(10 * CHUNK) if s >= CHUNK or s % 3 == 0]  # chunk 0 has gaps
    write(store, run_seq, {("k", s): (float(s), None) for s in dense})
    write(store, run_seq, {("k", s): (1.0, None) for s in (10 * CHUNK + 5, 10 * CHUNK + 9)})
    key_id = store.db.read_sync(metric_key_ids.key_ids, run_seq, ["k"], False)["k"]
    points = sorted([*dense, 10 * CHUNK + 5, 10 * CHUNK + 9])
    for lo, hi in [(100, 9 * CHUNK + 7), (0, 20 * CHUNK), (CHUNK + 1, CHUNK + 2), (2, 2), (7, 11)]:
        inside = [s for s in points if lo <= s <= hi]
        expected = (inside[0], inside[-1]) if inside else (None, None)
        got = store.db.read_sync(metric_chunks.extent, key_id, lo, hi, 10**9)
        assert got == (*expected, len(inside)), (lo, hi)
        first, last, bounded = store.db.read_sync(metric_chunks.extent, key_id, lo, hi, 2)
        assert (first, last) == expected and min(len(inside), 2) <= bounded <= len(inside)


def test_rows_then_a_dense_upload_then_overwrites_keep_one_value_per_step(store):
    run_seq = next(_runs)
    truth: dict[int, tuple[float, float | None]] = {}

    def put(points):
        write(store, run_seq, {("m", s): vt for s, vt in points.items()})
        truth.update(points)

    put({s: (1.0, None) for s in range(0, 3 * CHUNK, 97)})  # sparse: rows
    assert layout(store, run_seq, "m") == (len(truth), {})
    # Dense over part of chunk 1: the chunk absorbs chunk 1's rows, the others stay rows.
    put({s: (2.0, float(s)) for s in range(CHUNK + 10, CHUNK + 10 + DENSE)})
    rows, found = layout(store, run_seq, "m")
    in_chunk = [s for s in truth if s // CHUNK == 1]
    assert found == {1: len(in_chunk)} and rows == len(truth) - len(in_chunk)
    # A small overwrite inside the chunk goes into it (ts None replacing a time), and one
    # before it stays a row.
    overwrite = {
        CHUNK + 10: (3.0, None),
        CHUNK + 11: (-4.5, 12.0),
        CHUNK + 4000: (5.0, None),
        3: (6.0, 1.0),
    }
    put(overwrite)
    rows, found = layout(store, run_seq, "m")
    assert found == {1: len([s for s in truth if s // CHUNK == 1])}
    assert rows == len([s for s in truth if s // CHUNK != 1])
    assert everything(store, run_seq, "m")[CHUNK + 10] == (3.0, None)
    check_reads(store, run_seq, "m", truth)
    # Replaying the uploads, in their order, changes nothing.
    before = store.db.read_sync(lambda conn: conn.execute(select(chunks)).all())
    put({s: (2.0, float(s)) for s in range(CHUNK + 10, CHUNK + 10 + DENSE)})
    put(overwrite)
    after = store.db.read_sync(lambda conn: conn.execute(select(chunks)).all())
    assert sorted(map(tuple, after)) == sorted(map(tuple, before))
    check_reads(store, run_seq, "m", truth)


def test_infinities_and_extremes_round_trip(store):
    run_seq = next(_runs)
    values = [math.inf, -math.inf, 0.0, -0.0, 5e-324, 1.7976931348623157e308, -1e-300]
    truth = {s: (values[s % len(values)], None if s % 3 else 1e9 + s) for s in range(DENSE * 2)}
    write(store, run_seq, {("x", s): vt for s, vt in truth.items()})
    assert layout(store, run_seq, "x")[1] == {0: DENSE * 2}
    got = everything(store, run_seq, "x")
    assert got == truth
    assert [math.copysign(1, got[s][0]) for s in (2, 3)] == [1.0, -1.0]  # -0.0 kept


def test_one_upload_of_rows_then_a_chunk_of_the_same_range_builds_every_block(store):
    """Two write_points of one upload (the ingest's pieces): rows first, then a dense piece
    creating the chunk that absorbs them before the blocks are rebuilt."""
    run_seq = next(_runs)

    def upload_in_pieces(conn):
        touched = metric_sql.Touched()
        metric_sql.write_points(
            conn, run_seq, {("k", s): (float(s), None) for s in range(0, 60, 3)}, touched
        )
        metric_sql.write_points(
            conn, run_seq, {("k", s): (float(-s), None) for s in range(100, 100 + DENSE)}, touched
        )
        metric_sql.rebuild_blocks(conn, touched)

    store.db.write_sync(upload_in_pieces)
    truth = {s: (float(s), None) for s in range(0, 60, 3)}
    truth.update({s: (float(-s), None) for s in range(100, 100 + DENSE)})
    assert layout(store, run_seq, "k") == (0, {0: len(truth)})
    check_reads(store, run_seq, "k", truth)


def test_chunks_written_by_copy_on_postgresql(store, monkeypatch):
    """Many chunk rows in one write go by COPY into a staging table on PostgreSQL (bytea
    columns through COPY): forced here with a low bound."""
    monkeypatch.setattr("openruns.server.store.sql._PG_COPY_ROWS", 2)
    run_seq = next(_runs)
    truth = {s: (s * 0.25, None if s % 2 else float(s)) for s in range(3 * CHUNK)}
    write(store, run_seq, {(name, s): vt for s, vt in truth.items() for name in ("a", "b")})
    assert layout(store, run_seq, "b") == (0, {0: CHUNK, 1: CHUNK, 2: CHUNK})
    assert everything(store, run_seq, "a") == everything(store, run_seq, "b") == truth


def test_timeline_reads_times_from_chunks_and_rows(store):
    run_seq = next(_runs)
    points = {("t", s): (1.0, 1e9 + s) for s in range(CHUNK, CHUNK + 2000)}
    points.update({("t", s): (1.0, 1e9 + s) for s in range(0, 40, 10)})  # rows
    points.update({("t", s): (1.0, None) for s in range(CHUNK + 2000, CHUNK + 2600)})  # no time
    write(store, run_seq, points)
    line = store.db.read_sync(timeline.timeline, run_seq, 5)
    assert line["step"][0] == 0 and line["step"][-1] == CHUNK + 1999
    assert line["ts"] == [1e9 + s for s in line["step"]]
    assert line["step"] == sorted(set(line["step"])) and len(line["step"]) >= 3


@st.composite
def uploads(draw):
    """Uploads of one key, as rows [(step, value, ts)] in upload order: some dense runs of
    steps (forwards, backwards, or with a stretch sent twice), some sparse, overlapping; each
    written as a dict of points or parsed as NDJSON rows (the ingest's columns), cut into
    batches of `chunk_points`."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            start = draw(st.integers(0, 3 * CHUNK))
            length = draw(st.integers(DENSE - 10, 2 * CHUNK))
            stride = draw(st.sampled_from([1, 1, 2, 3]))
            steps = list(range(start, start + length * stride, stride))
            order = draw(st.sampled_from(["forwards", "backwards", "twice"]))
            if order == "backwards":
                steps.reverse()
            elif order == "twice":
                steps += steps[len(steps) // 3 : len(steps) // 2]
        else:
            steps = draw(st.lists(st.integers(0, 4 * CHUNK), max_size=40))
        value = st.floats(-1e9, 1e9, allow_nan=False)
        ts = st.none() | st.floats(0, 2e9)
        seed = draw(st.tuples(value, ts))
        rows = [
            (s, seed[0] + s % 17 + i / 8, None if seed[1] is None or s % 5 == 0 else seed[1] + s)
            for i, s in enumerate(steps)
        ]
        route = draw(st.sampled_from(["points", "rows"]))
        out.append((rows, route, draw(st.sampled_from([50, 1000, 100_000]))))
    return out


def ingest(store, run_seq, rows, chunk_points):
    """Rows through the ingest's parser into one transaction, as store.ingest_metrics."""
    lines = [(n, {"step": s, "ts": t, "values": {"p": v}}) for n, (s, v, t) in enumerate(rows)]

    def write(conn):
        touched = metric_sql.Touched()
        for _, batch in metric_batches(lines, chunk_points):
            metric_sql.write_points(conn, run_seq, batch, touched)
        metric_sql.rebuild_blocks(conn, touched)

    store.db.write_sync(write)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=uploads())
def test_any_uploads_read_back_as_the_last_writes(store, batches):
    run_seq = next(_runs)
    truth: dict[int, tuple[float, float | None]] = {}
    for rows, route, chunk_points in batches:
        if route == "points":
            write(store, run_seq, {("p", s): (v, t) for s, v, t in rows})
        else:
            ingest(store, run_seq, rows, chunk_points)
        truth.update((s, (v, t)) for s, v, t in rows)
    if not truth:
        return
    rows, found = layout(store, run_seq, "p")
    assert rows + sum(found.values()) == len(truth)  # each step in exactly one place
    check_reads(store, run_seq, "p", truth)


def test_deleting_a_run_leaves_no_chunk_and_usage_counts_points(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = create_run(http)["id"]
        body = metric_rows(range(3 * CHUNK), loss=lambda s: s / 3, lr=0.5)
        assert upload(http, rid, "metrics", body).status_code == 200
        assert upload(http, rid, "metrics", body).status_code == 200  # replayed: no change
        sparse = metric_rows(range(3 * CHUNK, 3 * CHUNK + 50), loss=1.0)
        assert upload(http, rid, "metrics", sparse).status_code == 200
        usage = {r["id"]: r for r in http.get("/usage").json()["runs"]}[rid]
        assert usage["metric_rows"] == 2 * 3 * CHUNK + 50  # points, rows and chunks
        assert usage["row_bytes"] < 20 * usage["metric_rows"]  # the chunks' bytes, not 40 a row
        export = http.get(f"/runs/{rid}/metrics", params={"keys": "loss", "max_points": 0})
        assert export.json()["series"]["loss"]["step"] == list(range(3 * CHUNK + 50))
        lines = http.get(f"/runs/{rid}/export/metrics.ndjson").content.splitlines()
        exported = [orjson.loads(line) for line in lines]
        loss = [(r["step"], r["value"], r["ts"]) for r in exported if r["key"] == "loss"]
        assert loss == [(s, s / 3, 1.0e9 + s) for s in range(3 * CHUNK)] + [
            (s, 1.0, 1.0e9 + s) for s in range(3 * CHUNK, 3 * CHUNK + 50)
        ]
        seq = seq_of(stores, rid)
        answer = http.delete(f"/runs/{rid}")
        assert answer.status_code == 200, answer.text
        removed = answer.json()["removed"]
        assert removed["metric_chunks"] == 6 and removed["metric_points"] == 50
    assert set(rows_left(stores, seq).values()) == {0}
    store = stores.open_store()
    try:
        left = store.db.read_sync(
            lambda conn: conn.execute(select(func.count()).select_from(chunks)).scalar_one()
        )
    finally:
        store.close()
    assert left == 0


def test_chunks_written_before_0021_read_back_the_same_after_it(backend, stores_factory, tmp_path):
    """Migration 0021 rebuilds metric_chunks with a rowid on SQLite (a WITHOUT ROWID table's
    lookups read its overflowing rows whole); the chunks of a database from before are kept,
    byte for byte. On PostgreSQL it changes nothing."""
    dense = metric_chunks.Points(
        steps=np.arange(0, 3 * CHUNK, 3, dtype=np.int64),  # spans three chunks, with gaps
        values=np.linspace(-1.0, 1.0, CHUNK),
        times=None,
    )
    groups = {
        (1, int(c)): metric_chunks.Points(dense.steps[part], dense.values[part], None)
        for c in range(3)
        if (part := (dense.steps // CHUNK) == c).any()
    }
    with database_at("0020", backend, stores_factory, tmp_path) as (url, conn):
        assert metric_chunks.write(conn, dict(groups), {}) == {}
        before = conn.execute(select(chunks).order_by(chunks.c.chunk)).all()
    assert len(before) == 3
    store = Store.open(url)  # migrates to the newest schema
    try:
        after = store.db.read_sync(
            lambda conn: conn.execute(select(chunks).order_by(chunks.c.chunk)).all()
        )
        assert [tuple(row) for row in after] == [tuple(row) for row in before]
        read = store.db.read_sync(lambda conn: metric_chunks.read(conn, 1, 0, 3 * CHUNK))
        assert [step for step, _, _ in read] == dense.steps.tolist()
        assert [value for _, value, _ in read] == dense.values.tolist()
        if backend == "sqlite":
            declared = store.db.read_sync(
                lambda conn: conn.execute(
                    text("SELECT sql FROM sqlite_master WHERE name = 'metric_chunks'")
                ).scalar_one()
            )
            assert "WITHOUT ROWID" not in declared
            assert (
                store.db.read_sync(
                    lambda conn: conn.execute(
                        text("SELECT count(rowid) FROM metric_chunks")
                    ).scalar()
                )
                == 3
            )
    finally:
        store.close()


def test_a_read_past_the_query_timeout_is_a_503_through_the_drivers_cursor(tmp_path):
    """The chart reads hand their statements to the driver's cursor (sql.driver_rows); a read
    SQLite stops at the query timeout is still the 503 every other statement gives. SQLite
    only: its timeout is the store's own progress handler, checked every 20,000 steps of its
    VM, so a timeout of 0 stops a read of 60,000 rows every time (PostgreSQL's is its
    server's statement_timeout, which no statement here is sure to exceed)."""
    url = f"sqlite:///{tmp_path}/openruns.db"
    rows = [(1, step, float(step), None) for step in range(60_000)]
    columns = ("key_id", "step", "value", "ts")
    setup = Store.open(url)
    try:
        setup.db.write_sync(lambda conn: executemany(conn, insert(metric_points), columns, rows))
        read = setup.db.read_sync(lambda conn: metric_chunks.read(conn, 1, 0, 10**9))
        assert len(read) == 60_000
    finally:
        setup.close()
    store = Store.open(url, query_timeout=0.0)
    try:
        with pytest.raises(ApiError) as stopped:
            store.db.read_sync(lambda conn: metric_chunks.read(conn, 1, 0, 10**9))
        assert (stopped.value.status_code, stopped.value.code) == (503, "query_timeout")
    finally:
        store.close()
