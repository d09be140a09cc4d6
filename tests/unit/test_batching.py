"""Frames and batches: every record is found by its index row, whatever the sizes."""

from __future__ import annotations

import io

import orjson
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from openruns.batches import check_frames, parse_header
from openruns.upload.batching import BatchAssembler, FrameCutter
from openruns.upload.encoder import PIECE_BYTES, Coercer, iter_pieces


def _decompressed(frames: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(frames), read_across_frames=True)
    return reader.read()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=30),
    frame_bytes=st.sampled_from([256, 4096, 1 << 20]),
    batch_bytes=st.sampled_from([1, 10_000, 1 << 30]),
)
def test_every_row_points_at_its_record(sizes, frame_bytes, batch_bytes):
    records = [{"id": f"r{i}", "text": "y" * n, "traces": []} for i, n in enumerate(sizes)]
    cutter = FrameCutter("episodes", batch_bytes, frame_bytes)
    assembler = BatchAssembler("episodes")
    batches = []
    for record in records:
        for work in cutter.add(iter_pieces(record), {"id": record["id"]}):
            batches.append(assembler.add(work))
    end = cutter.cut()
    if end is not None:
        batches.append(assembler.add(end))
    found = {}
    for batch in filter(None, batches):
        body = b"".join(batch.parts)
        header, start = parse_header(body)
        frames = check_frames(memoryview(body)[start:], header["frames"])
        content = _decompressed(body[start:])
        starts = [sum(size for _, size in frames[:i]) for i in range(len(frames))]
        for row in header["rows"]:
            assert row["offset"] < frames[row["frame"]][1]  # the line starts in its frame
            begin = starts[row["frame"]] + row["offset"]
            found[row["id"]] = orjson.loads(content[begin : begin + row["length"]])
        lines = sum(len(orjson.dumps(r)) + 1 for r in records if r["id"] in found)
        assert header["records"] == len(header["rows"])
        if len(header["rows"]) > 1:
            assert lines  # batches hold several records only under the batch bound
    assert found == {r["id"]: r for r in records}


def test_a_record_bigger_than_a_frame_starts_its_own_and_streams():
    cutter = FrameCutter("episodes", 1 << 30, frame_bytes=4 * PIECE_BYTES)
    big = {"id": "big", "traces": [{"nodes": [{"t": "z" * 1000}] * 2000}]}
    handed = list(cutter.add(iter_pieces({"id": "small"}), {"id": "small"}))
    assert handed == []  # a small record waits for company
    handed = list(cutter.add(iter_pieces(big), {"id": "big"}))
    assert len(handed) >= 5  # handed on frame by frame while it was being encoded
    assert handed[0].rows == [{"id": "small", "frame": 0, "offset": 0, "length": 14}]
    assert all(not work.ends_batch for work in handed)
    end = cutter.cut()
    assert end is not None and end.rows[0]["frame"] == 1 and end.rows[0]["offset"] == 0


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


def test_values_json_cannot_hold_are_converted_and_counted():
    converted: dict[str, int] = {}

    record = {"b": b"\x00\xff", "s": {3}, "o": Opaque(), "big": 2**70, (1, 2): "tuple key"}
    line = b"".join(bytes(p) for p in iter_pieces(record, Coercer(converted)))
    assert orjson.loads(line) == {
        "b": "AP8=",
        "s": [3],
        "o": "opaque!",
        "big": str(2**70),
        "(1, 2)": "tuple key",
    }
    assert converted == {
        "bytes as base64": 1,
        "set as list": 1,
        f"{__name__}.Opaque as str()": 1,
        "int beyond 64 bits as str()": 1,
        "tuple key as str()": 1,
    }
