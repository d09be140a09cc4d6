"""
Episode segments: the blob one episodes upload becomes, and its index rows.

A segment is the upload's NDJSON lines, byte for byte, in zstd frames of about FRAME_BYTES of
input each (a line is never split; a bigger line gets a frame of its own). `zstd -dc segment`
gives the NDJSON back. An index row locates its record by the frame (offset and length in the
blob) and the line inside the decompressed frame, so reading one episode decompresses one frame
(about 1 MiB, or the episode itself), never the whole segment.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import zstandard

from ..records import index_fields
from .body import iter_objects
from .errors import bad_request
from .store.metrics import MAX_STEP

__all__ = ["FRAME_BYTES", "Segment", "build_segment", "iter_segment", "read_record"]

# 1 MiB: compresses ~7% smaller and faster than 256 KiB frames on rollout JSON, and one
# frame still decompresses in a few ms when a single episode is read.
FRAME_BYTES = 1024 * 1024
MAX_ID_CHARS = 256
_MIN_INT = -(2**63)


@dataclass
class Segment:
    blob: bytes
    rows: list[dict[str, Any]]


def build_segment(data: bytes) -> Segment:
    """Compress `data` (NDJSON objects) into a segment and index it; 400 names a bad line."""
    compressor = zstandard.ZstdCompressor(level=1, write_checksum=True)
    frames: list[bytes] = []
    rows: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # rows of the frame being built: input bytes start..end
    start = end = size = 0

    def seal() -> None:
        nonlocal size
        chunk = data[start:end]
        frame = compressor.compress(chunk if chunk.endswith(b"\n") else chunk + b"\n")
        for row in pending:
            row["frame_offset"] = size
            row["frame_length"] = len(frame)
        frames.append(frame)
        size += len(frame)
        pending.clear()

    for lineno, offset, length, record in iter_objects(data):
        if pending and offset + length - start > FRAME_BYTES:
            seal()
        if not pending:
            start = offset
        row = _index_row(lineno, record)
        row["offset"] = offset - start
        row["length"] = length
        pending.append(row)
        rows.append(row)
        end = offset + length + 1
    if pending:
        seal()
    return Segment(b"".join(frames), rows)


def _index_row(lineno: int, record: dict[str, Any]) -> dict[str, Any]:
    try:
        fields = index_fields(record, None)
    except (TypeError, ValueError, OverflowError) as exc:
        raise bad_request(
            "invalid_record", f"line {lineno}: cannot index the record: {exc}"
        ) from exc
    episode_id = fields["id"] or uuid.uuid4().hex
    if len(episode_id) > MAX_ID_CHARS:
        raise bad_request(
            "invalid_record", f"line {lineno}: id is longer than {MAX_ID_CHARS} characters"
        )
    step = fields["step"]
    if step is not None and not _MIN_INT <= step <= MAX_STEP:
        raise bad_request("invalid_record", f"line {lineno}: step {step} is out of range")
    for name, limit in (("kind", 16), ("subset", 32)):
        if fields[name] is not None and len(fields[name]) > limit:
            raise bad_request(
                "invalid_record", f"line {lineno}: {name} is longer than {limit} characters"
            )
    tokens = fields["tokens"]
    return {
        "episode_id": episode_id,
        "kind": fields["kind"],
        "subset": fields["subset"],
        "step": step,
        "reward": fields["reward"],
        "env": fields["env"],
        "ok": fields["ok"],
        "tokens": tokens if tokens is not None and 0 <= tokens <= MAX_STEP else None,
        "duration": fields["duration"],
    }


def read_record(frame: bytes, offset: int, length: int) -> bytes:
    """One record's JSON from its (compressed) frame."""
    return zstandard.ZstdDecompressor().decompress(frame)[offset : offset + length]


def iter_segment(blob: bytes, piece: int = 1 << 20) -> Iterator[bytes]:
    """The segment's NDJSON, decompressed, in pieces."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True)
    while chunk := reader.read(piece):
        yield chunk
