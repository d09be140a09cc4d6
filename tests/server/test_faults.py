"""
Faults on the server's side never become a 500: a full disk (507 + Retry-After, reads go on,
writes resume by themselves), damaged, truncated or missing blobs (a clear answer naming the
segment; exports never cut mid-stream), and clients that hang up (no traceback in the log).

The full disk is real where it can be: on SQLite + folder the data directory is a small tmpfs
mounted for the test (the tests run as root in CI), so SQLite and the blob store meet ENOSPC
themselves. On PostgreSQL + S3 the database answers its own disk_full error (a trigger raises
SQLSTATE 53100 through the real driver) and the bucket answers as MinIO does when full
(XMinioStorageFull, HTTP 507), injected at boto3's client, the edge we do not own.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from sqlalchemy import create_engine

from openruns.server import serve_in_thread
from openruns.server.store import episodes as episodes_sql

from .. import patience
from .helpers import api, create_run, episode, error_of, metric_rows, ndjson, upload

TMPFS_BYTES = 24 * 1024 * 1024


def state_of(handle):
    return handle.server.config.app.state.server


@contextlib.contextmanager
def tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs (needs root): {done.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI runs as root: it must run this test
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class FullDisk:
    """fill() makes every new write fail for lack of space; free() gives the space back."""

    fill: Callable[[], None]
    free: Callable[[], None]


@contextlib.contextmanager
def full_disk(backend, stores_factory, tmp_path) -> Iterator[tuple[object, FullDisk]]:
    disk = FullDisk()
    if backend == "sqlite":
        with tmpfs(tmp_path / "small") as root:
            handle = serve_in_thread(root / "data")
            filler = root / "filler"

            def fill() -> None:
                # Empty the WAL into the database, so the next write must grow a file.
                with sqlite3.connect(root / "data" / "openruns.db") as conn:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    for size in (1 << 20, 1 << 16, 1 << 12, 1):  # down to the last byte
                        with contextlib.suppress(OSError):
                            while True:
                                os.write(fd, b"\0" * size)
                finally:
                    os.close(fd)

            disk.fill = fill
            disk.free = lambda: filler.unlink()
            try:
                yield handle, disk
            finally:
                handle.stop()
        return
    stores = stores_factory.new(backend, tmp_path / "data")
    handle = serve_in_thread(**stores.settings)
    engine = create_engine(stores.database_url())
    blobs = state_of(handle).blobs

    def bucket_full(**_: object) -> None:
        raise ClientError(
            {
                "Error": {"Code": "XMinioStorageFull", "Message": "Storage backend has reached"},
                "ResponseMetadata": {"HTTPStatusCode": 507},
            },
            "PutObject",
        )

    def fill() -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'could not extend file: No space left on device' "
                "USING ERRCODE = 'disk_full'; END $$"
            )
            for table in ("runs", "metric_points", "metric_keys", "segments", "episodes"):
                conn.exec_driver_sql(
                    f"CREATE TRIGGER full_{table} BEFORE INSERT OR UPDATE ON {table} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION disk_full()"
                )
        blobs.client.put_object = bucket_full

    def free() -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP FUNCTION disk_full() CASCADE")
        vars(blobs.client).pop("put_object", None)

    disk.fill, disk.free = fill, free
    try:
        yield handle, disk
    finally:
        # The client is the process's for that endpoint (store/s3.py): never left patched.
        vars(blobs.client).pop("put_object", None)
        handle.stop()
        engine.dispose()


def _is_507(response) -> bool:
    if response.status_code != 507:
        return False
    status, code, message = error_of(response)
    assert code == "insufficient_storage" and "out of space" in message, message
    assert int(response.headers["Retry-After"]) > 0
    return True


def test_a_full_disk_is_507_reads_go_on_and_writes_resume(
    backend, stores_factory, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="openruns.server")
    with full_disk(backend, stores_factory, tmp_path) as (handle, disk), api(handle.url) as http:
        run = create_run(http, id="kept")["id"]
        assert upload(http, run, "metrics", metric_rows(range(10), loss=1.0)).status_code == 200
        first = [episode(i, 0, 0.5) for i in range(3)]
        assert upload(http, run, "episodes", ndjson(first)).status_code == 200

        disk.fill()
        create = lambda: http.post("/runs", json={"kind": "eval", "id": "new-run"})  # noqa: E731
        later_metrics = metric_rows(range(10, 30_010), loss=2.0)  # grows the database
        later_episodes = ndjson([episode(i, 1, 1.0, pad="x" * 4096) for i in range(50)])
        assert _is_507(create())
        assert _is_507(upload(http, run, "metrics", later_metrics))
        assert _is_507(upload(http, run, "episodes", later_episodes))

        # Reads go on, and show exactly what was acknowledged.
        assert http.get(f"/runs/{run}").json()["status"] == "running"
        assert len(http.get(f"/runs/{run}/metrics").json()["series"]["loss"]["step"]) == 10
        assert len(http.get(f"/runs/{run}/episodes").json()["items"]) == 3
        assert http.get(f"/runs/{run}/episodes/ep-0-1").json()["id"] == "ep-0-1"
        assert http.get("/runs/new-run").status_code == 404

        disk.free()  # the same requests succeed, with nothing restarted
        assert create().status_code == 201
        assert upload(http, run, "metrics", later_metrics).status_code == 200
        assert upload(http, run, "episodes", later_episodes).status_code == 200
        series = http.get(f"/runs/{run}/metrics", params={"max_points": 0}).json()
        assert len(series["series"]["loss"]["step"]) == 30_010
        exported = http.get(f"/runs/{run}/export/episodes.ndjson").text.splitlines()
        assert len(exported) == 53
        assert len({orjson.loads(line)["id"] for line in exported}) == 53
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]


def _segments(handle, run_id: str) -> list[tuple[str, int]]:
    """(blob key, records) of the run's episode segments."""
    state = state_of(handle)

    def read(conn):
        from openruns.server.store import runs

        run = runs.get_run(conn, run_id)
        return [(key, n) for key, n, *_ in episodes_sql.segments_of(conn, run["seq"], "episodes")]

    return state.store.db.read_sync(read)


def test_damaged_truncated_or_missing_segments_are_named_and_exports_stay_whole(
    make_server, caplog
):
    caplog.set_level(logging.WARNING, logger="openruns.server")
    handle = make_server()
    with api(handle.url) as http:
        run = create_run(http)["id"]
        batches = [[episode(i, step, 0.25 * i) for i in range(3)] for step in range(4)]
        for batch in batches:
            assert upload(http, run, "episodes", ndjson(batch)).status_code == 200
        (missing, _), (truncated, _), (flipped, _), (intact, _) = _segments(handle, run)
        blobs = state_of(handle).blobs
        blobs.delete(missing)
        whole = blobs.get(truncated)
        blobs.put_atomic(truncated, whole[: len(whole) // 2])
        damaged = bytearray(blobs.get(flipped))
        damaged[len(damaged) // 2] ^= 0xFF
        blobs.put_atomic(flipped, bytes(damaged))

        for step, key, reason in (
            (0, missing, "missing"),
            (1, truncated, "truncated"),
            (2, flipped, "not the ones stored"),  # the frames' digest (issue 25)
        ):
            status, code, message = error_of(http.get(f"/runs/{run}/episodes/ep-{step}-1"))
            assert (status, code) == (410, "damaged_segment")
            assert key in message and reason in message and "openruns server check" in message
        assert http.get(f"/runs/{run}/episodes/ep-3-1").json()["id"] == "ep-3-1"

        # The whole-segment export and the record-wise one: whole lines, then the account.
        for params in ({}, {"env": "math"}):
            response = http.get(f"/runs/{run}/export/episodes.ndjson", params=params)
            assert response.status_code == 200
            lines = [orjson.loads(line) for line in response.content.splitlines()]
            *records, trailer = lines
            assert [r["id"] for r in records] == [f"ep-3-{i}" for i in range(3)]
            report = trailer["_openruns_export"]
            assert report["complete"] is False and report["skipped_records"] == 9
            assert {d["segment"] for d in report["damaged"]} == {missing, truncated, flipped}
            assert report["stopped"] is None

        response = http.get(f"/runs/{run}/export/episodes.parquet")
        table = pq.read_table(io.BytesIO(response.content))
        assert table.column("id").to_pylist() == [f"ep-3-{i}" for i in range(3)]
        footer = pq.ParquetFile(io.BytesIO(response.content)).metadata.metadata
        report = orjson.loads(footer[b"openruns.export"])
        assert report["skipped_records"] == 9 and len(report["damaged"]) == 3

        previews = http.get(f"/runs/{run}/previews", params={"ids": "ep-0-0,ep-3-0"})
        assert previews.status_code == 200
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]
    assert [r for r in caplog.records if "skipped 3 record(s)" in r.getMessage()]


def test_an_intact_export_has_no_account_line(client):
    run = create_run(client)["id"]
    records = [episode(i, 0, 1.0) for i in range(5)]
    assert upload(client, run, "episodes", ndjson(records)).status_code == 200
    exported = client.get(f"/runs/{run}/export/episodes.ndjson").content
    assert exported == ndjson(records)


def test_a_client_that_hangs_up_mid_body_is_not_an_internal_error(make_server, caplog):
    caplog.set_level(logging.INFO)
    uvicorn_errors = logging.getLogger("uvicorn.error")  # does not propagate to the root
    uvicorn_errors.addHandler(caplog.handler)
    try:
        handle = make_server()
        with api(handle.url) as http:
            run = create_run(http)["id"]
        host, port = handle.url.removeprefix("http://").split(":")
        paths = [f"/api/v1/runs/{run}/{kind}" for kind in ("metrics", "episodes", "annotations")]
        for path in paths:
            with socket.create_connection((host, int(port))) as conn:
                conn.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n"
                    "Content-Type: application/x-ndjson\r\n\r\n".encode()
                    + b'{"step": 1, "values": {"a": 1}}\n'
                )
        deadline = time.monotonic() + patience.SETTLE
        while time.monotonic() < deadline and _hung_up(caplog) < len(paths):
            time.sleep(0.05)
        assert _hung_up(caplog) == len(paths)
    finally:
        uvicorn_errors.removeHandler(caplog.handler)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert not [r for r in caplog.records if r.exc_info]


def _hung_up(caplog) -> int:
    return sum("client hung up" in r.getMessage() for r in caplog.records)


def test_a_missing_prime_sample_object_is_skipped_and_counted(make_server):
    handle = make_server()
    with httpx.Client(base_url=handle.url + "/api/v1", timeout=30) as http:
        env = http.post("/environmentshub/resolve", json={"name": "gsm8k"}).json()["data"]["id"]
        run = http.post("/evaluations/", json={"name": "e", "environments": [{"id": env}]})
        run_id = run.json()["evaluation_id"]
        for batch in ("a", "b"):
            body = {"samples": [{"sample_id": f"{batch}{i}"} for i in range(2)]}
            assert http.post(f"/evaluations/{run_id}/samples", json=body).status_code == 200
        state = state_of(handle)

        def objects(conn):
            from openruns.server.store import prime, runs

            return prime.list_objects(conn, runs.get_run(conn, run_id)["seq"], "eval_samples")

        first = state.store.db.read_sync(objects)[0]["blob_key"]
        state.blobs.delete(first)
        response = http.get(f"/runs/{run_id}/prime/eval-samples")
        *rows, trailer = [orjson.loads(line) for line in response.content.splitlines()]
        assert [r["sample_id"] for r in rows] == ["b0", "b1"]
        report = trailer["_openruns_export"]
        assert report["skipped_records"] == 2 and report["damaged"][0]["segment"] == first
