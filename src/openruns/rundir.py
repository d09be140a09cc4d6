"""
The on-disk run format: offline runs, upload spools and `openruns sync` all use it.

    <run dir>/
      run.json                               run metadata and status (written by the owner only)
      writers/<writer>.json                  one per writing process: pid, counts, losses
      <stream>/<writer>-<seq>.ndjson.zst     sealed segment (stream: metrics, episodes, traces,
                                             annotations)
      <stream>/<writer>-<seq>.ndjson.zst.open  the segment a live writer is appending to
      <stream>/<writer>.index.ndjson         episodes/traces: one index row per record

A segment is a sequence of zstd frames. One frame holds one batch of NDJSON lines, and a batch is
also the unit of upload (its Idempotency-Key is the SHA-256 of the frame's content), so a batch
replayed from disk can never be stored twice. Frames are appended with one write each and carry
a checksum, so a writer killed mid-frame leaves a readable segment whose torn tail is ignored.
A segment is sealed by fsync and an atomic rename; `zstd -dc <segment> | jq` reads either kind.
Each process writes its own segments (its writer id is new after fork), so writers never share a
file. Index rows point at (segment, frame offset, offset and length inside the frame).
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import zstandard

__all__ = [
    "SEALED_SUFFIX",
    "ROW_STREAMS",
    "STREAMS",
    "Frame",
    "SegmentWriter",
    "batch_key",
    "frame_length",
    "fsync_dir",
    "iter_frames",
    "iter_stream",
    "new_writer_id",
    "read_index",
    "read_json",
    "read_record",
    "segment_paths",
    "upload_target",
    "write_json_atomic",
]

STREAMS = ("metrics", "episodes", "traces", "annotations")
# Streams sent on the metrics lane (small rows that must not wait behind episodes).
ROW_STREAMS = ("metrics", "annotations")
SEALED_SUFFIX = ".ndjson.zst"
OPEN_SUFFIX = SEALED_SUFFIX + ".open"
# A segment is sealed once it holds this many compressed bytes; big enough that a long run has
# few files, small enough that a crashed writer's open segment is quick to recover.
SEGMENT_ROLL_BYTES = 64 * 1024 * 1024


def new_writer_id() -> str:
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def upload_target(run_id: str, stream: str) -> tuple[str, dict[str, str]]:
    """Where a batch of `stream` is POSTed (under /api/v1), and the headers that say what it is."""
    if stream in ROW_STREAMS:
        return f"/runs/{run_id}/{stream}", {}
    return f"/runs/{run_id}/episodes", {"X-Openruns-Stream": stream}


def batch_key(data: bytes) -> str:
    """The Idempotency-Key of a batch: `sha256:<hex>` of its uncompressed bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Frame:
    segment: str
    offset: int
    compressed: bytes
    data: bytes

    @property
    def key(self) -> str:
        return batch_key(self.data)


class SegmentWriter:
    """
    Appends frames to one stream's segments for one writer. Not thread-safe: one thread writes.
    Uses raw file descriptors, so no buffer can be flushed twice after fork.
    """

    def __init__(self, stream_dir: Path, writer_id: str, roll_bytes: int = SEGMENT_ROLL_BYTES):
        self.stream_dir = stream_dir
        self.writer_id = writer_id
        self.roll_bytes = roll_bytes
        self._seq = 0
        self._fd: int | None = None
        self._name = ""
        self._size = 0
        self._index_fd: int | None = None

    def append(self, frame: bytes) -> tuple[str, int]:
        """Write one frame; returns (segment name, frame offset)."""
        if self._fd is None:
            self._open_next()
        assert self._fd is not None
        offset = self._size
        _write_all(self._fd, frame)
        self._size += len(frame)
        name = self._name
        if self._size >= self.roll_bytes:
            self.seal()
        return name, offset

    def append_index(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self._index_fd is None:
            path = self.stream_dir / f"{self.writer_id}.index.ndjson"
            self._index_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _write_all(self._index_fd, b"".join(orjson.dumps(r) + b"\n" for r in rows))

    def sync(self) -> None:
        """Make everything appended so far durable."""
        for fd in (self._fd, self._index_fd):
            if fd is not None:
                os.fsync(fd)

    def seal(self) -> None:
        """Seal the open segment: fsync, close, rename to its final name."""
        if self._fd is None:
            return
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        final = self.stream_dir / self._name
        os.rename(self.stream_dir / (self._name + ".open"), final)
        fsync_dir(self.stream_dir)

    def close(self) -> None:
        self.seal()
        if self._index_fd is not None:
            os.fsync(self._index_fd)
            os.close(self._index_fd)
            self._index_fd = None

    def drop(self) -> None:
        """Forget inherited descriptors without closing or flushing them (after fork)."""
        self._fd = None
        self._index_fd = None

    def _open_next(self) -> None:
        self.stream_dir.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        self._name = f"{self.writer_id}-{self._seq:06d}{SEALED_SUFFIX}"
        path = self.stream_dir / (self._name + ".open")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._size = 0


def segment_paths(stream_dir: Path) -> list[Path]:
    """Sealed and open segments of a stream, in writing order per writer."""
    if not stream_dir.is_dir():
        return []
    paths = [
        p
        for p in stream_dir.iterdir()
        if p.name.endswith(SEALED_SUFFIX) or p.name.endswith(OPEN_SUFFIX)
    ]
    return sorted(paths, key=lambda p: p.name.removesuffix(".open"))


def iter_frames(path: Path) -> Iterator[Frame]:
    """The complete frames of a segment; a torn or corrupt tail ends the iteration."""
    raw = path.read_bytes()
    name = path.name.removesuffix(".open")
    offset = 0
    while offset < len(raw):
        frame = _frame_at(raw, offset, name)
        if frame is None:
            return
        yield frame
        offset += len(frame.compressed)


def iter_stream(run_dir: Path, stream: str) -> Iterator[dict[str, Any]]:
    """Every record of a stream (all writers), decoded."""
    for path in segment_paths(run_dir / stream):
        for frame in iter_frames(path):
            for line in frame.data.splitlines():
                if line:
                    yield orjson.loads(line)


def read_index(run_dir: Path, stream: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    stream_dir = run_dir / stream
    if not stream_dir.is_dir():
        return rows
    for path in sorted(stream_dir.glob("*.index.ndjson")):
        for line in path.read_bytes().splitlines():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                break  # a torn last line of a killed writer
    return rows


def read_record(run_dir: Path, stream: str, row: dict[str, Any]) -> dict[str, Any] | None:
    """The record an index row points at, or None when its frame is not on disk."""
    stream_dir = run_dir / stream
    for candidate in (row["segment"], row["segment"] + ".open"):
        path = stream_dir / candidate
        if path.exists():
            with path.open("rb") as fh:
                fh.seek(row["frame"])
                frame = _frame_at(fh.read(), 0, row["segment"])
            if frame is None:
                return None
            return orjson.loads(frame.data[row["offset"] : row["offset"] + row["length"]])
    return None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None


def write_json_atomic(path: Path, value: dict[str, Any]) -> None:
    """Replace `path` with `value` so that a reader sees the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _frame_at(raw: bytes, offset: int, segment: str) -> Frame | None:
    end = _frame_end(raw, offset)
    if end is None:
        return None
    compressed = raw[offset:end]
    try:
        data = zstandard.ZstdDecompressor().decompress(compressed)
    except zstandard.ZstdError:
        return None
    return Frame(segment, offset, compressed, data)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _frame_end(raw: bytes, offset: int) -> int | None:
    length = frame_length(io.BytesIO(raw), offset, len(raw))
    return None if length is None else offset + length


def frame_length(fh: BinaryIO, offset: int, file_size: int) -> int | None:
    """
    The length of the zstd frame at `offset`, from its block headers (RFC 8878 §3.1.1), or None
    when no whole frame starts there. Reads a few bytes per block, not the frame: python-zstandard
    does not expose ZSTD_findFrameCompressedSize, and decompressing to find the end would copy
    the rest of the file once per frame.
    """
    fh.seek(offset)
    head = fh.read(18)
    if head[:4] != _ZSTD_MAGIC or len(head) < 6:
        return None
    try:
        pos = offset + zstandard.frame_header_size(head)
    except zstandard.ZstdError:
        return None
    has_checksum = head[4] & 0x04
    while True:
        fh.seek(pos)
        header = fh.read(3)
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
    return pos - offset if pos <= file_size else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
