"""
The batch: the unit the SDK writes and uploads, and the server stores as it is.

    skippable zstd frame (magic 0x184D2A5B): the batch header, JSON:
        {"v": 1, "key": <Idempotency-Key>, "stream": ..., "records": n,
         "frames": [[compressed length, content size], ...],
         "rows": [{"id", "step", "kind", "subset", "env", "reward", "ok", "tokens",
                   "duration", "frame", "offset", "length"}, ...]}   (episodes and traces only)
    zstd frames of NDJSON lines (content size and checksum in each frame)

Frames hold about FRAME_BYTES of lines and end where a record ends, unless one record is bigger
(it then starts a frame and spans several). An index row locates its record by the frame it
starts in, and the line's offset and length in the decompressed frames from there, so one
record is read by decompressing its own frames. zstd skips the header frame: the whole batch
decompresses to its NDJSON. Batches sit in the run directory's segments (openruns.rundir) and
are the bodies of uploads (Content-Type BATCH_CONTENT_TYPE).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson
import zstandard

__all__ = [
    "BATCH_CONTENT_TYPE",
    "FRAME_BYTES",
    "Batch",
    "BatchFormatError",
    "batch_lines",
    "check_frames",
    "frame_length",
    "header_frame",
    "parse_header",
]

# Input bytes per zstd frame: reading one record decompresses about this much (or the record).
FRAME_BYTES = 1024 * 1024
HEADER_MAGIC = 0x184D2A5B  # a zstd skippable frame (RFC 8878 §3.1.2)
# The Content-Type of an upload whose body is one batch. A server that does not know it reads
# the body as zstd-encoded NDJSON (zstd skips the header frame), so old servers still work.
BATCH_CONTENT_TYPE = "application/vnd.openruns.batch+zstd"
MAX_HEADER_BYTES = 64 * 1024 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class BatchFormatError(ValueError):
    """A batch header or its frames are not what the format says (the message says how)."""


@dataclass
class Batch:
    """One encoded batch in memory: `parts` are the header frame and the data frames."""

    stream: str
    key: str
    records: int
    parts: list[bytes]
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.nbytes = sum(len(p) for p in self.parts)


def header_frame(header: dict[str, Any]) -> bytes:
    data = orjson.dumps(header)
    return struct.pack("<II", HEADER_MAGIC, len(data)) + data


def parse_header(buf: bytes | memoryview) -> tuple[dict[str, Any], int]:
    """(header, bytes it took) from a batch's start; BatchFormatError when there is none."""
    if len(buf) < 8:
        raise BatchFormatError("the body is too short to start with a batch header")
    magic, size = struct.unpack_from("<II", buf)
    if magic != HEADER_MAGIC:
        raise BatchFormatError("the body does not start with a batch header frame")
    if size > MAX_HEADER_BYTES or 8 + size > len(buf):
        raise BatchFormatError(f"the batch header's size ({size} bytes) is out of bounds")
    try:
        header = orjson.loads(buf[8 : 8 + size])
    except orjson.JSONDecodeError as exc:
        raise BatchFormatError(f"the batch header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("v") != 1:
        raise BatchFormatError("the batch header is not a version-1 header object")
    return header, 8 + size


def check_frames(data: bytes | memoryview, frames: Any) -> list[tuple[int, int]]:
    """
    Check, without decompressing, that `data` is exactly the zstd frames the header lists
    (`[[compressed length, content size], ...]`): each a zstd frame of that length, carrying its
    content size and a checksum. Returns the list as tuples; BatchFormatError names the frame.
    """
    if not isinstance(frames, list):
        raise BatchFormatError("frames must be a list of [length, size]")
    out: list[tuple[int, int]] = []
    offset = 0
    view = memoryview(data)
    for i, item in enumerate(frames):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(type(v) is int and v >= 0 for v in item)
        ):
            raise BatchFormatError(f"frame {i}: expected [length, size] as integers")
        length, size = item
        end = offset + length
        if end > len(view):
            raise BatchFormatError(f"frame {i}: its {length} bytes pass the end of the body")
        try:
            params = zstandard.get_frame_parameters(bytes(view[offset : offset + 18]))
        except zstandard.ZstdError as exc:
            raise BatchFormatError(f"frame {i}: not a zstd frame ({exc})") from exc
        if params.content_size != size or not params.has_checksum:
            raise BatchFormatError(
                f"frame {i}: its header must carry its content size ({size}) and a checksum"
            )
        if _walk_frame(lambda p, n: bytes(view[p : p + n]), offset, end) != length:
            raise BatchFormatError(f"frame {i}: the zstd frame is not {length} bytes long")
        out.append((length, size))
        offset = end
    if offset != len(view):
        raise BatchFormatError(f"{len(view) - offset} bytes follow the last frame")
    return out


def batch_lines(data: bytes, header_length: int) -> bytes:
    """The NDJSON of a batch's bytes (its data frames, decompressed)."""
    reader = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO(data[header_length:]), read_across_frames=True
    )
    return reader.read()


def frame_length(fh: BinaryIO, offset: int, file_size: int) -> int | None:
    """
    The length of the zstd frame at `offset` of a file, from its block headers (RFC 8878
    §3.1.1), or None when no whole frame starts there. Reads a few bytes per block, not the
    frame: python-zstandard does not expose ZSTD_findFrameCompressedSize, and decompressing to
    find the end would copy the rest of the file once per frame.
    """

    def read(position: int, n: int) -> bytes:
        fh.seek(position)
        return fh.read(n)

    return _walk_frame(read, offset, file_size)


def _walk_frame(read: Callable[[int, int], bytes], offset: int, end: int) -> int | None:
    head = read(offset, 18)
    if head[:4] != _ZSTD_MAGIC or len(head) < 6:
        return None
    try:
        pos = offset + zstandard.frame_header_size(head)
    except zstandard.ZstdError:
        return None
    has_checksum = head[4] & 0x04
    while True:
        header = read(pos, 3)
        if len(header) < 3:
            return None
        value = int.from_bytes(header, "little")
        last, block_type, size = value & 1, (value >> 1) & 3, value >> 3
        if block_type == 3:
            return None
        pos += 3 + (1 if block_type == 1 else size)
        if last:
            break
    pos += 4 if has_checksum else 0
    return pos - offset if pos <= end else None
