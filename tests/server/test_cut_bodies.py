"""
A compressed body cut short is refused, never stored as its decodable prefix (issue 25, row 4).

Before the fix a zstd body cut at any of 19 points answered 200 "committed" with the records
that decoded, and the whole body under the same Idempotency-Key then got 422: the rest could
never arrive. Now every cut is 400 `truncated_body` (or `invalid_body` when the cut falls
inside a frame header), nothing is stored, and the whole body then commits under the key.
"""

from __future__ import annotations

import gzip
import zlib

import zstandard

from openruns.rundir import batch_key

from .helpers import api, create_run, episode, error_of, metric_rows, ndjson

MiB = 1 << 20


def _zstd_stream(data: bytes) -> bytes:
    """zstd as a streaming compressor writes it: one frame of many blocks, no content size,
    so every prefix past the header decodes to some records (what made cuts look whole)."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    pieces = [compressor.compress(data[i : i + 8192]) for i in range(0, len(data), 8192)]
    return b"".join([*pieces, compressor.flush()])


def _gzip_stream(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, wbits=31)
    return compressor.compress(data) + compressor.flush()


def _cuts(size: int) -> list[int]:
    """Cut points over the whole body: the first bytes (inside the header), the middle, the
    last bytes (inside the final block and the checksum)."""
    return sorted({*range(1, 12), *range(12, size, max(1, size // 40)), *range(size - 8, size)})


def _post(http, run_id: str, kind: str, body: bytes, encoding: str, key: str):
    headers = {
        "Content-Encoding": encoding,
        "Content-Type": "application/x-ndjson",
        "Idempotency-Key": key,
    }
    return http.post(f"/runs/{run_id}/{kind}", content=body, headers=headers)


def test_a_cut_zstd_episodes_body_is_refused_at_every_offset(shared_server):
    records = [episode(i, step=1, reward=i / 10, text="x" * (i % 50)) for i in range(400)]
    data = ndjson(records)
    body = _zstd_stream(data)
    key = batch_key(data)
    with api(shared_server.url) as http:
        rid = create_run(http)["id"]
        for cut in _cuts(len(body)):
            status, code, message = error_of(_post(http, rid, "episodes", body[:cut], "zstd", key))
            assert status == 400, (cut, status, message)
            assert code in ("truncated_body", "invalid_body"), (cut, code, message)
        assert "cut short" in message  # the last cuts fall inside the final block
        assert http.get(f"/runs/{rid}/episodes").json()["items"] == []
        # Nothing was kept under the key: the whole body commits, all of it.
        whole = _post(http, rid, "episodes", body, "zstd", key)
        assert whole.status_code == 200, whole.text
        assert whole.json()["records"] == len(records)
        again = _post(http, rid, "episodes", body, "zstd", key)
        assert again.json() == whole.json()


def test_a_cut_metrics_body_is_refused_and_the_whole_one_commits(shared_server):
    data = metric_rows(range(3000), loss=lambda s: 1 / (s + 1))
    bodies = {"zstd": _zstd_stream(data), "gzip": _gzip_stream(data)}
    with api(shared_server.url) as http:
        for encoding, body in bodies.items():
            rid = create_run(http)["id"]
            key = f"metrics-{encoding}"
            for cut in _cuts(len(body))[::3]:
                response = _post(http, rid, "metrics", body[:cut], encoding, key)
                status, code, message = error_of(response)
                assert status == 400, (encoding, cut, status, message)
                assert code in ("truncated_body", "invalid_body"), (encoding, cut, code)
            whole = _post(http, rid, "metrics", body, encoding, key)
            assert whole.status_code == 200, (encoding, whole.text)
            params = {"keys": "loss", "max_points": 0}
            series = http.get(f"/runs/{rid}/metrics", params=params).json()["series"]
            assert series["loss"]["step"] == list(range(3000)), encoding


def test_concatenated_frames_and_members_are_whole_bodies(shared_server):
    # Two frames (two gzip members) back to back are one valid body: both halves are kept.
    records = [episode(i, step=2, reward=1.0) for i in range(20)]
    first, second = ndjson(records[:10]), ndjson(records[10:])
    with api(shared_server.url) as http:
        for encoding, pack in (("zstd", _zstd_stream), ("gzip", gzip.compress)):
            rid = create_run(http)["id"]
            body = pack(first) + pack(second)
            response = _post(http, rid, "episodes", body, encoding, f"two-{encoding}")
            assert response.status_code == 200, response.text
            assert response.json()["records"] == 20
            cut = body[: len(body) - 5]  # the second frame cut short: refused, not half kept
            status, code, _ = error_of(_post(http, rid, "episodes", cut, encoding, "cut"))
            assert (status, code) == (400, "truncated_body")
