"""The store without HTTP, on both databases: metric merge and downsampling against a
brute-force model, blobs, body decoding, migrations."""

from __future__ import annotations

import gzip
import itertools
import math
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import zstandard
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openruns.server.body import decompress
from openruns.server.errors import ApiError
from openruns.server.store import LocalBlobStore, Store, metric_reads
from openruns.server.store import metrics as metric_sql
from openruns.server.store.migrate import NewerSchemaError
from openruns.server.store.schema import metadata


@pytest.fixture(scope="module")
def store(backend, stores_factory, tmp_path_factory):
    opened = stores_factory.new(backend, tmp_path_factory.mktemp("store")).open_store()
    yield opened
    opened.close()


_runs = itertools.count(1000)


@st.composite
def series_case(draw):
    start = draw(st.integers(0, 2_000_000))
    dense = draw(st.integers(0, 6000))
    sparse = draw(st.lists(st.integers(0, 5_000_000), max_size=60))
    steps = sorted(set(range(start, start + dense)) | set(sparse))
    value = st.floats(-1e6, 1e6, allow_nan=False)
    batches = draw(st.integers(1, 3))
    # Later batches rewrite a random subset of steps: last write wins.
    writes = [{s: draw(value) for s in steps}]
    for _ in range(batches - 1):
        rewrite = draw(st.lists(st.sampled_from(steps), max_size=50)) if steps else []
        writes.append({s: draw(value) for s in rewrite})
    lo = draw(st.integers(0, 5_000_000))
    hi = draw(st.integers(lo, 5_000_001))
    if draw(st.booleans()):
        lo, hi = 0, metric_sql.MAX_STEP
    return writes, lo, hi, draw(st.integers(1, 400))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=series_case())
def test_downsampled_series_matches_brute_force(store, case):
    writes, lo, hi, max_points = case
    run_seq = next(_runs)
    truth: dict[int, float] = {}
    for batch in writes:
        store.db.write_sync(
            metric_sql.write_points, run_seq, {("m", s): (v, None) for s, v in batch.items()}
        )
        truth.update(batch)
    points = sorted((s, v) for s, v in truth.items() if lo <= s <= hi)
    series, downsampled = store.db.read_sync(
        metric_reads.series, run_seq, ["m"], lo, hi, max_points
    )
    if not truth:
        assert series == {}
        return
    got = series["m"]
    if len(points) <= max_points:
        assert not downsampled
        assert got["step"] == [s for s, _ in points]
        assert got["value"] == got["min"] == got["max"] == [v for _, v in points]
        return
    assert downsampled
    assert 0 < len(got["step"]) <= max_points
    assert got["step"] == sorted(set(got["step"])) and got["step"][-1] == points[-1][0]
    assert_buckets(got, points)


def test_a_read_ending_inside_a_block_takes_it_whole_only_when_nothing_of_it_is_past_the_end(
    store,
):
    """A downsampled read covers its range with stored blocks; the block its last step falls
    in is taken whole when none of its points lies past that step (a read up to the series'
    last point), else its points up to that step come from the level below."""
    run_seq = next(_runs)
    truth = {s: math.sin(s / 97) * 100 + (s % 13) for s in range(10_000)}
    store.db.write_sync(
        metric_sql.write_points, run_seq, {("m", s): (v, None) for s, v in truth.items()}
    )
    # 256-step blocks serve both reads; step 5000 falls in block 19 (4864..5119).
    for hi in (5_000, 5_119, 9_999, metric_sql.MAX_STEP):
        points = sorted((s, v) for s, v in truth.items() if s <= hi)
        series, downsampled = store.db.read_sync(metric_reads.series, run_seq, ["m"], 0, hi, 20)
        assert downsampled
        assert series["m"]["step"][-1] == points[-1][0]
        assert_buckets(series["m"], points)


def test_key_stats_and_merge(store):
    run_seq = next(_runs)
    store.db.write_sync(
        metric_sql.write_points, run_seq, {("a", s): (1.0, None) for s in range(70000)}
    )
    store.db.write_sync(
        metric_sql.write_points, run_seq, {("a", 5): (9.0, 1.0), ("b", 3): (2.0, None)}
    )
    stats = store.db.read_sync(metric_reads.key_stats, run_seq)
    assert stats == [
        {"key": "a", "label": "a", "axis": "step", "last_step": 69999, "last_ts": None,
         "last_value": 1.0, "count": 70000, "step_metric": None},
        {"key": "b", "label": "b", "axis": "step", "last_step": 3, "last_ts": None,
         "last_value": 2.0, "count": 1, "step_metric": None},
    ]  # fmt: skip
    series, _ = store.db.read_sync(metric_reads.series, run_seq, ["a"], 4, 6, 0)
    assert series["a"]["value"] == [1.0, 9.0, 1.0]


def test_blob_store_writes_atomically(tmp_path):
    blobs = LocalBlobStore(tmp_path / "blobs")
    blobs.put_atomic("runs/1/episodes/x.ndjson.zst", b"0123456789")
    assert blobs.get("runs/1/episodes/x.ndjson.zst") == b"0123456789"
    assert blobs.get_range("runs/1/episodes/x.ndjson.zst", 3, 4) == b"3456"
    assert blobs.exists("runs/1/episodes/x.ndjson.zst")
    assert os.listdir(tmp_path / "blobs" / "runs" / "1" / "episodes") == ["x.ndjson.zst"]
    for bad in ("", "../x", "a//b", "a/./b", "/abs", ".hidden"):
        with pytest.raises(ValueError):
            blobs.put_atomic(bad, b"")


def test_decompress_caps_the_output_not_the_input():
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (8 << 20))
    assert len(bomb) < 4096
    with pytest.raises(ApiError) as err:
        decompress(bomb, "zstd", 1 << 20)
    assert (err.value.status_code, err.value.code) == (413, "decompressed_body_too_large")
    gz_bomb = gzip.compress(b"\0" * (8 << 20))
    with pytest.raises(ApiError) as err:
        decompress(gz_bomb, "gzip", 1 << 20)
    assert err.value.status_code == 413
    two_members = gzip.compress(b"a\n") + gzip.compress(b"b\n")
    assert decompress(two_members, "gzip", 100) == b"a\nb\n"
    frames = zstandard.ZstdCompressor().compress(b"a\n") + zstandard.ZstdCompressor().compress(
        b"b\n"
    )
    assert decompress(frames, "zstd", 100) == b"a\nb\n"
    for body, encoding in (
        (b"not zstd", "zstd"),
        (b"not gzip", "gzip"),
        (gzip.compress(b"x")[:-3], "gzip"),
    ):
        with pytest.raises(ApiError) as err:
            decompress(body, encoding, 100)
        assert err.value.status_code == 400
    with pytest.raises(ApiError) as err:
        decompress(b"", "br", 100)
    assert err.value.status_code == 415


def test_migrations_run_once_and_the_secret_is_stable(tmp_path):
    url = f"sqlite:///{tmp_path}/openruns.db"
    first = Store.open(url)
    secret = first.secret
    first.close()
    second = Store.open(url)
    assert second.secret == secret
    second.close()


def test_replicas_starting_together_migrate_once(backend, stores_factory, tmp_path):
    """Four stores open one empty database at once: the migration lock lets one migrate, the
    others wait and find the schema at head; all share one server secret."""
    if backend == "postgres":
        url = stores_factory.postgres().new_database(migrated=False)
        url = url.replace("postgresql://", "postgresql+psycopg://")
    else:
        url = f"sqlite:///{tmp_path}/openruns.db"
    barrier = threading.Barrier(4)

    def open_one(_: int) -> Store:
        barrier.wait()
        return Store.open(url)

    with ThreadPoolExecutor(4) as pool:
        opened = list(pool.map(open_one, range(4)))
    try:
        assert len({s.secret for s in opened}) == 1
        version = opened[0].db.read_sync(
            lambda conn: conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        )
        assert len(version) == 1
    finally:
        for s in opened:
            s.close()


def test_the_migrations_build_the_schema_the_code_declares(store):
    """schema.py is what the code reads and the migrations are what a database gets: an index
    in one and not the other (0020 rebuilt the episodes' listing indexes) is a plan nobody
    checked. The search index's tables are made by hand (search.py) and not declared."""
    with store.db.writer.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    hand_made = ("remove_table", "remove_index")
    drift = [
        d
        for d in diff
        if not (
            d[0] in hand_made and getattr(d[1], "table", d[1]).name.startswith("episode_search")
        )
    ]
    assert drift == []


def test_a_newer_schema_is_refused_in_words(tmp_path):
    url = f"sqlite:///{tmp_path}/openruns.db"
    Store.open(url).close()
    db = sqlite3.connect(tmp_path / "openruns.db")
    db.execute("UPDATE alembic_version SET version_num = '9999'")
    db.commit()
    db.close()
    with pytest.raises(NewerSchemaError, match="migrated by a newer openruns.*upgrade this server"):
        Store.open(url)


def assert_buckets(got: dict, points: list) -> None:
    """A downsampled series `got` against its points [(step, value)] in step order: each
    bucket is the run of points after the previous bucket's step up to its own step, its value
    the last of them, min and max over all of them."""
    i = 0
    for step, value, low, high in zip(
        got["step"], got["value"], got["min"], got["max"], strict=True
    ):
        bucket = []
        while i < len(points) and points[i][0] <= step:
            bucket.append(points[i][1])
            i += 1
        assert bucket and points[i - 1][0] == step
        assert (value, low, high) == (bucket[-1], min(bucket), max(bucket))
    assert i == len(points)
