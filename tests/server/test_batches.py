"""The SDK's episode batches: stored as sent (frames kept, index rows taken), checked cheaply."""

from __future__ import annotations

import struct

import orjson
import pytest
import zstandard
from sqlalchemy import select

from openruns.batches import BATCH_CONTENT_TYPE, Batch, header_frame, parse_header
from openruns.records import record_kind
from openruns.server.store.schema import segments
from openruns.upload.batching import BatchAssembler, FrameCutter
from openruns.upload.encoder import iter_pieces
from openruns.wire import WireClient

from .helpers import api, create_run, error_of


def _episode(i: int, size: int = 100, work_type: str | None = None) -> dict:
    record = {"id": f"e{i}", "env": "math", "reward": i / 10, "blob": "x" * size, "traces": []}
    if work_type is not None:
        record["run"] = {"work": {"type": work_type, "step": i}}
    return record


def _batch(records: list[dict], batch_bytes: int = 1 << 30, frame_bytes: int = 4096) -> Batch:
    """A batch as the SDK's pipeline builds it (small frames, so records span several)."""
    cutter = FrameCutter("episodes", batch_bytes, frame_bytes)
    assembler = BatchAssembler("episodes")
    out = []
    for record in records:
        row = {"id": record["id"], "step": None, "kind": record_kind(record), "env": "math"}
        row.update(reward=record["reward"], ok=None, tokens=None, duration=None)
        for work in cutter.add(iter_pieces(record), row):
            out.append(assembler.add(work))
    out.append(assembler.add(cutter.cut()))
    (batch,) = [b for b in out if b is not None]
    return batch


def _post(client, run_id: str, body: bytes, key: str = "k1", **headers: str):
    headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": key, **headers}
    return client.post(f"/runs/{run_id}/episodes", content=body, headers=headers)


def test_a_batch_is_stored_as_sent_and_each_record_reads_back(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    records = [_episode(i, size=100 if i % 3 else 9000) for i in range(12)]
    batch = _batch(records)
    wire = WireClient(server.url, None)
    with api(server.url) as client:
        run_id = create_run(client, kind="eval")["id"]
        receipt = wire.upload(run_id, "episodes", batch.parts, key=batch.key)
        assert receipt == {"status": "committed", "records": 12, "receipt": batch.key}
        assert wire.upload(run_id, "episodes", batch.parts, key=batch.key) == receipt  # replay
        for record in records:
            got = client.get(f"/runs/{run_id}/episodes/{record['id']}")
            assert got.json() == record
        exported = client.get(f"/runs/{run_id}/export/episodes.ndjson").content
        assert [orjson.loads(line)["id"] for line in exported.splitlines()] == [
            r["id"] for r in records
        ]
    wire.close()
    store = stores.open_store()
    try:
        keys = store.db.read_sync(lambda conn: list(conn.execute(select(segments.c.blob_key))))
    finally:
        store.close()
    (blob_key,) = [row[0] for row in keys]
    _, header_length = parse_header(batch.parts[0])
    stored = stores.open_blobs().get(blob_key)
    assert stored == b"".join(batch.parts)[header_length:]  # the SDK's frames, byte for byte


def test_the_kind_is_stored_from_the_record_or_the_run(client):
    batch = _batch([_episode(0, work_type="train"), _episode(1), _episode(2, work_type="eval")])
    lines = b"".join(
        orjson.dumps(_episode(i, work_type="train" if i == 4 else None)) + b"\n"
        for i in range(3, 5)
    )
    run_id = create_run(client, kind="eval")["id"]
    assert _post(client, run_id, b"".join(batch.parts)).status_code == 200
    ndjson = zstandard.ZstdCompressor().compress(lines)
    plain = {"Content-Type": "application/x-ndjson", "Content-Encoding": "zstd"}
    response = client.post(f"/runs/{run_id}/episodes", content=ndjson, headers=plain)
    assert response.status_code == 200
    rows = client.get(f"/runs/{run_id}/episodes", params={"limit": 100}).json()["items"]
    kinds = {row["id"]: row["kind"] for row in rows}
    assert kinds == {"e0": "train", "e1": "eval", "e2": "eval", "e3": "eval", "e4": "train"}


def test_a_batch_sent_as_ndjson_is_read_as_ndjson(client):
    """An older server reads the SDK's batch as zstd NDJSON: zstd skips the header frame."""
    run_id = create_run(client)["id"]
    batch = _batch([_episode(i) for i in range(3)])
    headers = {"Content-Type": "application/x-ndjson", "Content-Encoding": "zstd"}
    response = client.post(
        f"/runs/{run_id}/episodes", content=b"".join(batch.parts), headers=headers
    )
    assert response.json()["records"] == 3
    assert client.get(f"/runs/{run_id}/episodes/e2").json() == _episode(2)


def _rewrite_header(batch: Batch, change) -> bytes:
    header, length = parse_header(batch.parts[0])
    change(header)
    return header_frame(header) + b"".join(batch.parts)[length:]


def _no_checksum(batch: Batch) -> bytes:
    header, length = parse_header(batch.parts[0])
    frame = zstandard.ZstdCompressor(write_checksum=False).compress(b'{"id":"e0"}\n')
    header["frames"] = [[len(frame), 12]]
    header["rows"] = [{**header["rows"][0], "offset": 0, "length": 11}]
    header["records"] = 1
    return header_frame(header) + frame


BAD_BATCHES = {
    "a frame's length": lambda b: _rewrite_header(
        b, lambda h: h["frames"][0].__setitem__(0, h["frames"][0][0] + 1)
    ),
    "a frame's size": lambda b: _rewrite_header(
        b, lambda h: h["frames"][0].__setitem__(1, h["frames"][0][1] - 1)
    ),
    "the row count": lambda b: _rewrite_header(b, lambda h: h.__setitem__("records", 99)),
    "a line past the frames": lambda b: _rewrite_header(
        b, lambda h: h["rows"][-1].__setitem__("length", 10**9)
    ),
    "a line in no frame": lambda b: _rewrite_header(
        b, lambda h: h["rows"][0].__setitem__("frame", 99)
    ),
    "a NaN reward": lambda b: _rewrite_header(
        b, lambda h: h["rows"][0].__setitem__("reward", "NaN")
    ),
    "a kind too long": lambda b: _rewrite_header(
        b, lambda h: h["rows"][0].__setitem__("kind", "k" * 17)
    ),
    "a missing checksum": _no_checksum,
    "a header that is not JSON": lambda b: struct.pack("<II", 0x184D2A5B, 3) + b"{{{",
    "trailing bytes": lambda b: b"".join(b.parts) + b"\0",
}


@pytest.mark.parametrize("what", list(BAD_BATCHES))
def test_a_batch_that_breaks_the_format_is_refused_and_nothing_stored(client, what):
    run_id = create_run(client)["id"]
    body = BAD_BATCHES[what](_batch([_episode(i) for i in range(5)], frame_bytes=200))
    status, code, message = error_of(_post(client, run_id, body))
    assert (status, code) == (400, "invalid_batch"), message
    assert client.get(f"/runs/{run_id}/steps").json() == []


def test_a_batch_holding_more_than_the_decompressed_limit_is_413(make_server):
    server = make_server(max_decompressed_bytes=10_000)
    with api(server.url) as client:
        run_id = create_run(client)["id"]
        body = b"".join(_batch([_episode(i, size=3000) for i in range(5)]).parts)
        assert error_of(_post(client, run_id, body))[:2] == (413, "decompressed_body_too_large")
