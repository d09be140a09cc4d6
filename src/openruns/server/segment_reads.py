"""
Reading stored segments when a blob may be missing, truncated or damaged.

A segment is a blob of zstd frames, each with a checksum, whose decompressed concatenation is
the records as NDJSON. Blobs are written whole before their index rows commit, so a blob that
cannot be read is damage from outside (a disk, a restore, someone's `rm`), never a normal
state. Readers get a clear answer naming the segment instead of a 500:

- `read_record`: one record by its index row; `DamagedSegment` (410 `damaged_segment`) names
  the blob and what is wrong with it.
- `iter_lines`: a whole segment as complete NDJSON lines, each frame checked (its checksum)
  before any of its lines is handed out, so an export never sends part of a damaged record;
  `zstandard.ZstdError` once a frame is found damaged.

`openruns server check` (check.py) finds such blobs ahead of the readers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import zstandard

from .errors import ApiError
from .segments import read_record as decode_record
from .store.blobs import BlobStore

__all__ = ["DamagedSegment", "iter_frames", "iter_lines", "read_frames", "read_record"]

_CHUNK = 1 << 17


class DamagedSegment(ApiError):
    """A stored segment cannot be read back: 410 naming the blob and the damage."""

    def __init__(self, blob_key: str, reason: str):
        super().__init__(
            410,
            "damaged_segment",
            f"the stored segment {blob_key} is damaged ({reason}); the server's operator can "
            "list damaged blobs with `openruns server check`",
        )
        self.blob_key = blob_key
        self.reason = reason


def read_frames(blobs: BlobStore, blob_key: str, offset: int, length: int) -> bytes:
    """`length` bytes of a segment at `offset`; DamagedSegment when the blob is missing or
    shorter than the index says. Transient store errors (503) pass through."""
    try:
        raw = blobs.get_range(blob_key, offset, length)
    except FileNotFoundError as exc:
        raise DamagedSegment(blob_key, "the blob is missing") from exc
    if len(raw) < length:
        raise DamagedSegment(
            blob_key, f"truncated: {len(raw)} of the {length} bytes at offset {offset}"
        )
    return raw


def read_record(blobs: BlobStore, row: dict[str, Any]) -> bytes:
    """One record's JSON from its index row (blob_key, frame_offset, frame_length, offset,
    length); DamagedSegment when it cannot be read back whole."""
    key = row["blob_key"]
    frames = read_frames(blobs, key, row["frame_offset"], row["frame_length"])
    try:
        record = decode_record(frames, row["offset"], row["length"])
    except zstandard.ZstdError as exc:
        raise DamagedSegment(key, f"a frame does not decompress: {exc}") from exc
    if len(record) != row["length"]:
        raise DamagedSegment(key, "the record is cut short")
    return record


def iter_frames(blob: bytes) -> Iterator[bytes]:
    """The decompressed content of each zstd frame of `blob`, in order, each verified against
    its checksum before it is handed out; ZstdError at the first damaged or truncated one."""
    view = memoryview(blob)
    position = 0
    pending = b""
    while position < len(view) or pending:
        decoder = zstandard.ZstdDecompressor().decompressobj()
        out: list[bytes] = []
        data: bytes = pending
        pending = b""
        while True:
            if not data:
                if position >= len(view):
                    raise zstandard.ZstdError("the last frame is truncated")
                data = bytes(view[position : position + _CHUNK])
                position += _CHUNK
            out.append(decoder.decompress(data))
            data = b""
            if decoder.eof:
                pending = decoder.unused_data
                break
        yield b"".join(out)


def iter_lines(blob: bytes) -> Iterator[bytes]:
    """The segment's NDJSON in pieces that end at a line's end (a line may span frames); the
    part of a line in a frame found damaged is never handed out."""
    carry = b""
    for content in iter_frames(blob):
        data = carry + content
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield data[:cut]
    if carry.strip():
        yield carry + b"\n"
