"""
Prime wire bodies that were accepted as something other than what was sent (issue 25), on both
stores: a presigned PUT replayed over a written object (row 5), a Parquet object that decodes
to far more than it weighs (row 7), a Prime Traces upload with two `traces` parts (row 8).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .helpers import ServerProcess, error_of

MiB = 1 << 20


def _prime(url: str) -> httpx.Client:
    return httpx.Client(base_url=url + "/api/v1", timeout=120)


def _train_run(http: httpx.Client) -> str:
    body = {"base_model": "m", "max_steps": 0, "environments": [], "team_id": "default"}
    response = http.post("/rft/external-runs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["run"]["id"])


def _presign(http: httpx.Client, run_id: str, step: int) -> tuple[str, str]:
    response = http.post("/rft/samples/presign", json={"run_id": run_id, "step": step})
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    return data["presignedUrl"], data["s3Key"]


def _confirm(http: httpx.Client, run_id: str, step: int, key: str) -> httpx.Response:
    return http.post("/rft/samples/confirm", json={"run_id": run_id, "step": step, "s3_key": key})


def _parquet(infos: list[str], **columns: list[object]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"info": infos, **columns}), out)
    return out.getvalue()


def _info(episode_id: str) -> str:
    episode = {"id": episode_id, "traces": [{"reward": 1.0}]}
    return orjson.dumps({"native_wrapper": episode}).decode()


def _dictionary_bomb(rows: int, value_bytes: int) -> bytes:
    """`rows` rows whose `info` is one `value_bytes` string, stored once in the column's
    dictionary: the file weighs about `value_bytes`, its column decodes to `rows` times that."""
    value = os.urandom(value_bytes // 2).hex()
    info = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([value]))
    out = io.BytesIO()
    pq.write_table(pa.table({"info": info}), out)
    return out.getvalue()


# -- row 5: a signed URL writes once -----------------------------------------------------------


def test_a_replayed_presigned_put_never_replaces_the_object(shared_server):
    first = _parquet([_info("p1")])
    other = _parquet([_info("p2")])
    assert len(first) == len(other)  # same size: before the fix the download silently changed
    with _prime(shared_server.url) as http, httpx.Client(timeout=60) as bare:
        run_id = _train_run(http)
        url, key = _presign(http, run_id, 3)
        assert bare.put(url, content=first).json() == {"key": key, "bytes": len(first)}
        # Before confirm: the client's retry of the same bytes is answered as the first PUT;
        # other bytes are refused, so whoever holds the URL cannot swap the object.
        assert bare.put(url, content=first).json() == {"key": key, "bytes": len(first)}
        status, code, message = error_of(bare.put(url, content=other))
        assert (status, code) == (409, "object_exists"), message
        assert _confirm(http, run_id, 3, key).json()["data"]["rows"] == 1
        # After confirm, the same: the URL has not expired, and still writes nothing new.
        status, code, _ = error_of(bare.put(url, content=other))
        assert (status, code) == (409, "object_exists")
        assert bare.put(url, content=first).status_code == 200
        items = http.get(f"/runs/{run_id}/prime/train-samples").json()["items"]
        assert [item["bytes"] for item in items] == [len(first)]
        assert http.get(shared_server.url + items[0]["url"]).content == first
        episodes = http.get(f"/runs/{run_id}/episodes").json()["items"]
        assert [e["id"] for e in episodes] == ["p1"]


# -- row 7: a Parquet object is bounded like every other body -----------------------------------


def test_a_parquet_object_decoding_past_the_byte_bound_is_413_naming_it(make_server):
    server = make_server(max_decompressed_bytes=8 * MiB)
    bomb = _dictionary_bomb(rows=64, value_bytes=1 * MiB)  # ~1 MiB that decodes to 64 MiB
    assert len(bomb) < 2 * MiB
    with _prime(server.url) as http, httpx.Client(timeout=60) as bare:
        run_id = _train_run(http)
        url, key = _presign(http, run_id, 1)
        assert bare.put(url, content=bomb).status_code == 200
        status, code, message = error_of(_confirm(http, run_id, 1, key))
        assert (status, code) == (413, "decompressed_body_too_large"), message
        assert str(8 * MiB) in message
        assert http.get(f"/runs/{run_id}/prime/train-samples").json()["items"] == []
        # A file within the bounds, beside it, is confirmed as before.
        url, key = _presign(http, run_id, 2)
        bare.put(url, content=_parquet([_info("ok-1"), _info("ok-2")], n=[1, 2]))
        assert _confirm(http, run_id, 2, key).json()["data"]["rows"] == 2


def test_a_parquet_object_past_the_row_or_record_bound_is_413(make_server):
    server = make_server(max_upload_lines=100, max_record_bytes=64 * 1024)
    with _prime(server.url) as http, httpx.Client(timeout=60) as bare:
        run_id = _train_run(http)
        url, key = _presign(http, run_id, 1)
        bare.put(url, content=_parquet([_info(f"r{i}") for i in range(101)]))
        status, code, message = error_of(_confirm(http, run_id, 1, key))
        assert (status, code) == (413, "too_many_rows"), message
        assert "100" in message
        url, key = _presign(http, run_id, 2)
        bare.put(url, content=_parquet(["x" * (65 * 1024)]))
        status, code, message = error_of(_confirm(http, run_id, 2, key))
        assert (status, code) == (413, "line_too_large"), message


def _high_water_mark(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_a_parquet_bomb_is_refused_without_the_memory_of_its_expansion(tmp_path):
    # 2 MiB on disk, 4 GiB decoded, under the server's default bounds: before the fix
    # read_table + to_pylist materialised the whole column at confirm.
    bomb = _dictionary_bomb(rows=2048, value_bytes=2 * MiB)
    server = ServerProcess(tmp_path / "data").start()
    try:
        assert server.proc is not None
        with _prime(server.url) as http, httpx.Client(timeout=120) as bare:
            run_id = _train_run(http)
            url, key = _presign(http, run_id, 1)
            assert bare.put(url, content=bomb).status_code == 200
            baseline = _high_water_mark(server.proc.pid)
            status, code, _ = error_of(_confirm(http, run_id, 1, key))
            assert (status, code) == (413, "decompressed_body_too_large")
            grown = _high_water_mark(server.proc.pid) - baseline
            assert grown < 256 * MiB, f"the server's high-water mark grew by {grown >> 20} MiB"
    finally:
        server.stop()


# -- row 8: one `traces` part per upload --------------------------------------------------------


def _traces_upload(
    http: httpx.Client, parts: list[tuple[str, bytes]], key: bytes
) -> httpx.Response:
    files = [
        ("metadata", (None, b'{"schema_version":1}', "application/json")),
        *[
            (
                name,
                (
                    "traces.jsonl",
                    gzip.compress(data, mtime=0),
                    "application/x-ndjson",
                    {"Content-Encoding": "gzip"},
                ),
            )
            for name, data in parts
        ],
    ]
    headers = {
        "Idempotency-Key": f"sha256:{hashlib.sha256(key).hexdigest()}",
        "X-Prime-Line-Format": "episode",
    }
    return http.post("/traces", files=files, headers=headers)


def test_a_traces_upload_with_two_traces_parts_is_400_and_stores_nothing(shared_server):
    with _prime(shared_server.url) as http:
        run_id = _train_run(http)

        def lines(*ids: str) -> bytes:
            run = {"id": run_id, "type": "train"}
            return b"".join(
                orjson.dumps({"id": i, "run": run, "traces": [{"reward": 1.0}]}) + b"\n"
                for i in ids
            )

        first, second = lines("a1", "a2"), lines("b1")
        for key in (first, second, first + second):
            response = _traces_upload(http, [("traces", first), ("traces", second)], key)
            status, code, message = error_of(response)
            assert (status, code) == (400, "duplicate_part"), message
            assert "`traces`" in message
        assert http.get(f"/runs/{run_id}/episodes").json()["items"] == []
        # One part, as prime-traces sends it: stored.
        response = _traces_upload(http, [("traces", first + second)], first + second)
        assert response.status_code == 201, response.text
        ids = sorted(e["id"] for e in http.get(f"/runs/{run_id}/episodes").json()["items"])
        assert ids == ["a1", "a2", "b1"]
