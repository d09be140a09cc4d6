"""
The on-disk run format: offline runs, upload spools and `openruns sync` all use it, and one
batch on disk is, byte for byte, the body of its upload.

    <run dir>/
      run.json                               run metadata and status (written by the owner only)
      writers/<writer>.json                  one per writing process: pid; counts at its close
      <stream>/<writer>-<seq>.ndjson.zst     sealed segment (stream: metrics, episodes, traces,
                                             annotations, logs: console lines)
      <stream>/<writer>-<seq>.ndjson.zst.open  the segment a live writer is appending to
      <stream>/acked.ndjson                  spools: {"key"} of each batch the server acknowledged
      <stream>/rejected.ndjson               {"key"} of each batch the server refused (sync)

A segment is a sequence of batches (openruns.batches: a header frame, then zstd frames), each
appended with one write, so a batch on disk is, byte for byte, the body of its upload. `zstd
-dc <segment> | jq` reads any segment (zstd skips the header frames). A writer killed mid-batch
leaves a readable segment whose torn tail is ignored. Sealing is fsync and an atomic rename;
each process writes its own segments (its writer id is new after fork), so writers never share
a segment.

The spool of an online run is its run directory (`Spool`): batches the server did not take in
time are appended to segments, acknowledged ones are listed in acked.ndjson, and a segment is
deleted once every batch in it is acknowledged.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .batches import (
    HEADER_MAGIC,
    MAX_HEADER_BYTES,
    Batch,
    BatchFormatError,
    batch_lines,
    parse_header,
)

__all__ = [
    "SEALED_SUFFIX",
    "ROW_STREAMS",
    "STREAMS",
    "SegmentWriter",
    "Spool",
    "SpoolRef",
    "StoredBatch",
    "batch_key",
    "acked_keys",
    "fsync_dir",
    "iter_batches",
    "iter_stream",
    "new_writer_id",
    "read_batch",
    "read_index",
    "read_json",
    "remove_delivered",
    "read_record",
    "segment_paths",
    "upload_target",
    "write_json_atomic",
]

STREAMS = ("metrics", "episodes", "traces", "annotations", "logs", "alerts")
# Streams sent on the metrics lane (small rows that must not wait behind episodes), each to its
# own route: metric rows, annotations, console lines (console.py), alerts (run.alert, and the
# report of a NaN or infinite metric value).
ROW_STREAMS = ("metrics", "annotations", "logs", "alerts")
SEALED_SUFFIX = ".ndjson.zst"
OPEN_SUFFIX = SEALED_SUFFIX + ".open"
# A segment is sealed once it holds this many bytes; big enough that a long run has few files,
# small enough that a crashed writer's open segment is quick to recover.
SEGMENT_ROLL_BYTES = 64 * 1024 * 1024


def new_writer_id() -> str:
    return f"{os.getpid()}-{secrets.token_hex(3)}"


def upload_target(run_id: str, stream: str) -> tuple[str, dict[str, str]]:
    """Where a batch of `stream` is POSTed (under /api/v1), and the headers that say what it is."""
    if stream in ROW_STREAMS:
        return f"/runs/{run_id}/{stream}", {}
    return f"/runs/{run_id}/episodes", {"X-Openruns-Stream": stream}


def batch_key(data: bytes) -> str:
    """`sha256:<hex>` of an upload body's NDJSON: the key the server gives a keyless upload."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- batches in segments ---------------------------------------------------------------------


@dataclass(frozen=True)
class StoredBatch:
    """A batch in a segment: its header and where its bytes (header included) are."""

    segment: str
    offset: int
    length: int
    header: dict[str, Any]
    header_length: int

    @property
    def key(self) -> str:
        return str(self.header.get("key"))

    @property
    def records(self) -> int:
        return int(self.header.get("records") or 0)


def iter_batches(path: Path) -> Iterator[StoredBatch]:
    """The complete batches of a segment; a torn or unreadable tail ends the iteration."""
    name = path.name.removesuffix(".open")
    size = path.stat().st_size
    offset = 0
    with path.open("rb") as fh:
        while offset < size:
            fh.seek(offset)
            head = fh.read(8)
            if len(head) < 8:
                return
            magic, header_size = struct.unpack("<II", head)
            if magic != HEADER_MAGIC or header_size > MAX_HEADER_BYTES:
                return
            try:
                header, header_length = parse_header(head + fh.read(header_size))
                length = header_length + sum(int(f[0]) for f in header["frames"])
            except (BatchFormatError, KeyError, TypeError, ValueError, IndexError):
                return
            if offset + length > size:
                return
            yield StoredBatch(name, offset, length, header, header_length)
            offset += length


def read_batch(stream_dir: Path, batch: StoredBatch | SpoolRef) -> bytes:
    """A stored batch's bytes (header frame and data frames): the body of its upload."""
    for name in (batch.segment + ".open", batch.segment):
        try:
            with open(stream_dir / name, "rb") as fh:
                fh.seek(batch.offset)
                data = fh.read(batch.length)
        except FileNotFoundError:
            continue
        if len(data) == batch.length:
            return data
    raise FileNotFoundError(f"segment {batch.segment} in {stream_dir} no longer holds the batch")


# -- writing segments -------------------------------------------------------------------------


class SegmentWriter:
    """
    Appends batches to one stream's segments for one writer. Not thread-safe: one thread writes.
    Uses raw file descriptors (os.writev, never a userspace buffer), so nothing can be flushed
    twice after fork.
    """

    def __init__(self, stream_dir: Path, writer_id: str, roll_bytes: int = SEGMENT_ROLL_BYTES):
        self.stream_dir = stream_dir
        self.writer_id = writer_id
        self.roll_bytes = roll_bytes
        self._seq = 0
        self._fd: int | None = None
        self._name = ""
        self._size = 0

    @property
    def open_segment(self) -> str | None:
        return self._name if self._fd is not None else None

    def append(self, parts: list[bytes]) -> tuple[str, int]:
        """Write one batch in one write; returns (segment name, offset). May seal the segment."""
        if self._fd is None:
            self._open_next()
        assert self._fd is not None
        offset = self._size
        try:
            self._size += _write_all(self._fd, parts)
        except OSError:
            os.ftruncate(self._fd, offset)  # no torn batch in the middle of the segment
            raise
        name = self._name
        if self._size >= self.roll_bytes:
            self.seal()
        return name, offset

    def sync(self) -> None:
        """Make everything appended so far durable."""
        if self._fd is not None:
            os.fsync(self._fd)

    def seal(self) -> None:
        """Seal the open segment: fsync, close, rename to its final name."""
        if self._fd is None:
            return
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        os.rename(self.stream_dir / (self._name + ".open"), self.stream_dir / self._name)
        fsync_dir(self.stream_dir)

    close = seal

    def drop(self) -> None:
        """Forget an inherited descriptor without closing or flushing it (after fork)."""
        self._fd = None

    def discard(self) -> None:
        """Close and delete the open segment (its every batch is already elsewhere)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        (self.stream_dir / (self._name + ".open")).unlink(missing_ok=True)

    def _open_next(self) -> None:
        self.stream_dir.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        self._name = f"{self.writer_id}-{self._seq:06d}{SEALED_SUFFIX}"
        path = self.stream_dir / (self._name + ".open")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._size = 0


# -- the spool --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpoolRef:
    stream: str
    segment: str
    offset: int
    length: int


@dataclass
class _SegmentState:
    bytes: int = 0
    unacked: int = 0
    sealed: bool = False


@dataclass
class Spool:
    """
    The batches of one writing process that its server has not acknowledged yet, kept in the
    run directory of an online run. `put` appends a batch (None when it would pass `max_bytes`
    of disk: the caller counts the loss); `ack` records that the server has it, and deletes a
    sealed segment once all its batches are acknowledged; `close` seals what is open and deletes
    what is fully acknowledged. Thread-safe. `openruns sync` uploads what is left.
    """

    run_dir: Path
    writer_id: str
    max_bytes: int
    roll_bytes: int = SEGMENT_ROLL_BYTES
    bytes_used: int = 0
    _writers: dict[str, SegmentWriter] = field(default_factory=dict)
    _segments: dict[tuple[str, str], _SegmentState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, batch: Batch) -> SpoolRef | None:
        with self._lock:
            if self.bytes_used + batch.nbytes > self.max_bytes:
                return None
            writer = self._writers.get(batch.stream)
            if writer is None:
                writer = SegmentWriter(self.run_dir / batch.stream, self.writer_id, self.roll_bytes)
                self._writers[batch.stream] = writer
            segment, offset = writer.append(batch.parts)
            state = self._segments.setdefault((batch.stream, segment), _SegmentState())
            state.bytes += batch.nbytes
            state.unacked += 1
            self.bytes_used += batch.nbytes
            if writer.open_segment != segment:
                self._sealed(batch.stream, segment)
            return SpoolRef(batch.stream, segment, offset, batch.nbytes)

    def read(self, ref: SpoolRef) -> bytes:
        return read_batch(self.run_dir / ref.stream, ref)

    def ack(self, ref: SpoolRef, key: str) -> None:
        """The server has the batch (or refused it for good): `openruns sync` skips it."""
        line = orjson.dumps({"key": key}) + b"\n"
        with self._lock:
            try:
                with open(self.run_dir / ref.stream / "acked.ndjson", "ab") as fh:
                    fh.write(line)
            except OSError:
                pass  # not recorded: `openruns sync` sends it again, the server keeps it once
            state = self._segments.get((ref.stream, ref.segment))
            if state is None:
                return
            state.unacked -= 1
            writer = self._writers.get(ref.stream)
            if state.unacked <= 0 and writer is not None and writer.open_segment == ref.segment:
                writer.discard()  # the backlog is delivered: the next batch starts a new one
                state.sealed = True
            self._delete_if_done(ref.stream, ref.segment)

    def sync(self, streams: tuple[str, ...]) -> None:
        with self._lock:
            for stream in streams:
                if stream in self._writers:
                    self._writers[stream].sync()

    def close(self, streams: tuple[str, ...]) -> None:
        with self._lock:
            for stream in streams:
                writer = self._writers.pop(stream, None)
                if writer is None:
                    continue
                segment = writer.open_segment
                writer.close()
                if segment is not None:
                    self._sealed(stream, segment)
                _forget_acks_if_empty(self.run_dir / stream)

    def drop(self) -> None:
        with self._lock:
            for writer in self._writers.values():
                writer.drop()
            self._writers = {}

    def _sealed(self, stream: str, segment: str) -> None:
        state = self._segments.get((stream, segment))
        if state is not None:
            state.sealed = True
            self._delete_if_done(stream, segment)

    def _delete_if_done(self, stream: str, segment: str) -> None:
        state = self._segments[(stream, segment)]
        if state.sealed and state.unacked <= 0:
            (self.run_dir / stream / segment).unlink(missing_ok=True)
            self.bytes_used -= state.bytes
            del self._segments[(stream, segment)]


def _forget_acks_if_empty(stream_dir: Path) -> None:
    """With no segment left (of any writer), the acknowledgements refer to nothing."""
    if not segment_paths(stream_dir):
        (stream_dir / "acked.ndjson").unlink(missing_ok=True)


def remove_delivered(run_dir: Path, *, parent: bool = False) -> bool:
    """
    Remove an online run's directory once the server has everything (issue 24: an online run
    that delivered everything leaves nothing behind); with `parent`, its parent too when that
    is left empty (the default `./openruns-runs`, made for it).
    Only what describes delivered data goes (run.json, writers' and reports' records, the
    acknowledgement lists); a segment left by any writer keeps the directory, with all it holds,
    for `openruns sync`. True when the directory is gone.
    """
    if any(segment_paths(run_dir / stream) for stream in STREAMS):
        return False
    for stream in STREAMS:
        (run_dir / stream / "acked.ndjson").unlink(missing_ok=True)
    for folder in ("writers", "reports"):
        for path in (run_dir / folder).glob("*.json"):
            path.unlink(missing_ok=True)
    (run_dir / "run.json").unlink(missing_ok=True)
    for path in [*(run_dir / s for s in STREAMS), run_dir / "writers", run_dir / "reports"]:
        _rmdir(path)
    gone = _rmdir(run_dir)
    if gone and parent:
        _rmdir(run_dir.parent)
    return gone


def _rmdir(path: Path) -> bool:
    """Remove `path` if it is an empty directory; True when it is not there afterwards."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:  # not empty (another writer, another run), or not ours to remove
        return False
    return True


def acked_keys(stream_dir: Path) -> set[str]:
    """Keys of the batches the server acknowledged or refused for good."""
    keys: set[str] = set()
    for name in ("acked.ndjson", "rejected.ndjson"):
        path = stream_dir / name
        if path.exists():
            for line in path.read_bytes().splitlines():
                try:
                    keys.add(orjson.loads(line)["key"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn last line
    return keys


# -- reading ----------------------------------------------------------------------------------


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


def iter_stream(run_dir: Path, stream: str) -> Iterator[dict[str, Any]]:
    """Every record of a stream (all writers), decoded."""
    for path in segment_paths(run_dir / stream):
        for batch in iter_batches(path):
            data = read_batch(run_dir / stream, batch)
            for line in batch_lines(data, batch.header_length).splitlines():
                if line:
                    yield orjson.loads(line)


def read_index(run_dir: Path, stream: str) -> list[dict[str, Any]]:
    """
    The index rows of an episodes or traces stream, each with where its record is: `segment`,
    `frame_offset` and `frame_length` (its frames' bytes in the segment), `offset` and `length`
    (its line in those frames, decompressed).
    """
    rows: list[dict[str, Any]] = []
    for path in segment_paths(run_dir / stream):
        for batch in iter_batches(path):
            starts, sizes, lengths = _frame_starts(batch)
            for row in batch.header.get("rows") or []:
                frame = row["frame"]
                last = _last_frame(sizes, frame, row["offset"] + row["length"])
                location = {
                    "segment": batch.segment,
                    "frame_offset": starts[frame],
                    "frame_length": starts[last] + lengths[last] - starts[frame],
                }
                rows.append({**row, **location})
    return rows


def read_record(run_dir: Path, stream: str, row: dict[str, Any]) -> dict[str, Any] | None:
    """The record an index row points at, or None when its frames are not on disk."""
    ref = SpoolRef(stream, row["segment"], row["frame_offset"], row["frame_length"])
    try:
        frames = read_batch(run_dir / stream, ref)
    except FileNotFoundError:
        return None
    data = batch_lines(frames, 0)
    record: dict[str, Any] = orjson.loads(data[row["offset"] : row["offset"] + row["length"]])
    return record


def _frame_starts(batch: StoredBatch) -> tuple[list[int], list[int], list[int]]:
    starts, sizes, lengths = [], [], []
    position = batch.offset + batch.header_length
    for length, size in batch.header["frames"]:
        starts.append(position)
        sizes.append(size)
        lengths.append(length)
        position += length
    return starts, sizes, lengths


def _last_frame(sizes: list[int], first: int, end: int) -> int:
    """The frame holding byte `end - 1` of the content that starts at frame `first`."""
    last, covered = first, sizes[first]
    while covered < end and last + 1 < len(sizes):
        last += 1
        covered += sizes[last]
    return last


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = orjson.loads(path.read_bytes())
        return doc
    except FileNotFoundError:
        return None


def write_json_atomic(path: Path, value: dict[str, Any]) -> None:
    """
    Replace `path` with `value` so that a reader sees the old or the new file, never a mix. The
    folder is made when missing, and made again when another process attached to the run
    removes it, emptied, between the two (remove_delivered at its finish).
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    try:
        _write_all(fd, [orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_all(fd: int, parts: list[bytes]) -> int:
    """Write every part, in order, in as few system calls as the kernel allows."""
    views = [memoryview(p) for p in parts if len(p)]
    total = sum(len(v) for v in views)
    while views:
        written = os.writev(fd, views[:1024])  # IOV_MAX
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if written:
            views[0] = views[0][written:]
    return total


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
