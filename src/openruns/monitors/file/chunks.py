"""
The episode stream of the file monitor: numbered chunks of zstd frames, and an index.

    monitors/file/episodes/00000.jsonl.zst        sealed chunk
    monitors/file/episodes/00001.open.jsonl.zst   the chunk being written
    monitors/file/episodes.index.jsonl            one row per episode, in arrival order
    monitors/file/episodes.lock                   held (flock) by the one writing process

Each episode is one NDJSON line compressed as its own zstd frame (with a checksum), so an index
row `(chunk, offset, size)` is a seek and one decompression, and `zstd -dc episodes/*.zst | jq`
reads the whole stream in order. A chunk rolls before a frame
would take it past `chunk_bytes`; an episode never spans chunks. Sealing (fsync, rename to the
final name, fsync the directory) runs on a separate thread so the writer goes on at once.

Write order is frame, then index row: every index row a reader sees points at a whole frame.
A writer killed mid-frame leaves a torn tail; the next writer (a relaunch) truncates it away,
indexes any whole frame that missed its index row, seals every open chunk and continues the
numbering (line and chunk) after what is on disk.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import zstandard

from ...batches import frame_length

__all__ = [
    "OPEN_SUFFIX",
    "SEALED_SUFFIX",
    "ChunkWriter",
    "chunk_numbers",
    "chunk_path",
    "decompress_frame",
    "read_index_rows",
]

SEALED_SUFFIX = ".jsonl.zst"
OPEN_SUFFIX = ".open.jsonl.zst"


def chunk_path(stream_dir: Path, number: int) -> Path:
    """The chunk's file: sealed if it is, else the open one (which may not exist)."""
    sealed = stream_dir / f"{number:05d}{SEALED_SUFFIX}"
    return sealed if sealed.exists() else stream_dir / f"{number:05d}{OPEN_SUFFIX}"


def chunk_numbers(stream_dir: Path) -> dict[int, bool]:
    """{chunk number: sealed?} of the chunks on disk."""
    out: dict[int, bool] = {}
    if not stream_dir.is_dir():
        return out
    for path in stream_dir.iterdir():
        name = path.name
        for suffix, sealed in ((OPEN_SUFFIX, False), (SEALED_SUFFIX, True)):
            stem = name.removesuffix(suffix)
            if stem != name and stem.isdigit():
                out[int(stem)] = out.get(int(stem), False) or sealed
                break
    return dict(sorted(out.items()))


def read_index_rows(index_path: Path) -> tuple[list[dict[str, Any]], int]:
    """The index rows, and the byte length of the whole rows (a torn last row is left out)."""
    try:
        raw = index_path.read_bytes()
    except FileNotFoundError:
        return [], 0
    rows: list[dict[str, Any]] = []
    good = 0
    for line in raw.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            rows.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            break
        good += len(line)
    return rows, good


def decompress_frame(dctx: zstandard.ZstdDecompressor, frame: bytes) -> bytes:
    """The content of one whole zstd frame (its header need not carry the content size)."""
    dobj = dctx.decompressobj()
    data = dobj.decompress(frame)
    if not dobj.eof:
        raise zstandard.ZstdError("truncated zstd frame")
    return data


class ChunkWriter:
    """
    Appends frames to the stream in `stream_dir` and rows to its index. One thread calls it;
    one process at a time may hold it open (`open()` raises RuntimeError otherwise).

    `reindex(line_bytes) -> row fields` rebuilds the index fields of an episode found on disk
    without an index row (recovery).
    """

    def __init__(
        self,
        stream_dir: Path,
        index_path: Path,
        chunk_bytes: int,
        reindex: Callable[[bytes], dict[str, Any]],
    ):
        self.stream_dir = stream_dir
        self.index_path = index_path
        self.chunk_bytes = chunk_bytes
        self._reindex = reindex
        self._lock_fd: int | None = None
        self._index_fd: int | None = None
        self._fd: int | None = None
        self._chunk = -1
        self._size = 0
        self._lines = 0
        self._sealer = concurrent.futures.ThreadPoolExecutor(1, "openruns-file-sealer")
        self._seals: list[concurrent.futures.Future[None]] = []

    @property
    def lines(self) -> int:
        """Episodes in the stream (including those of earlier writers)."""
        return self._lines

    def open(self) -> None:
        self.stream_dir.mkdir(parents=True, exist_ok=True)
        lock_path = self.index_path.with_name(self.stream_dir.name + ".lock")
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise RuntimeError(
                f"{self.stream_dir} is being written by another live process; one process "
                "writes a file monitor's episode stream (give this one its own output_dir)"
            ) from None
        rows, good = read_index_rows(self.index_path)
        self._index_fd = os.open(self.index_path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(self._index_fd, good)  # a torn last row of a killed writer
        os.lseek(self._index_fd, 0, os.SEEK_END)
        self._lines = rows[-1]["line"] if rows else 0
        self._recover(rows)

    def append(self, frame: list[bytes], fields: dict[str, Any]) -> dict[str, Any]:
        """Write one episode's frame (its parts, in order), then its index row; returns the row."""
        size = sum(len(part) for part in frame)
        if self._fd is not None and self._size and self._size + size > self.chunk_bytes:
            self._roll()
        if self._fd is None:
            self._open_chunk(max(chunk_numbers(self.stream_dir), default=-1) + 1)
        assert self._fd is not None
        offset = self._size
        for part in frame:  # never joined: a copy of MBs would hold the GIL that long
            _write_all(self._fd, part)
        self._size += size
        return self._index(self._chunk, offset, size, fields)

    def close(self) -> None:
        """Seal the open chunk, wait for every seal, release the stream. Raises a seal's error."""
        try:
            if self._fd is not None:
                self._roll()
            self._sealer.shutdown(wait=True)
            for seal in self._seals:
                seal.result()
        finally:
            if self._index_fd is not None:
                os.fsync(self._index_fd)
                os.close(self._index_fd)
                self._index_fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    # -- internals ----------------------------------------------------------------------------

    def _index(self, chunk: int, offset: int, size: int, fields: dict[str, Any]) -> dict[str, Any]:
        assert self._index_fd is not None
        self._lines += 1
        row = {"line": self._lines, "chunk": chunk, "offset": offset, "size": size, **fields}
        _write_all(self._index_fd, orjson.dumps(row) + b"\n")
        return row

    def _open_chunk(self, number: int) -> None:
        self._chunk = number
        path = self.stream_dir / f"{number:05d}{OPEN_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._size = 0

    def _roll(self) -> None:
        fd, number = self._fd, self._chunk
        assert fd is not None  # callers roll only an open chunk
        self._fd = None
        self._seals.append(self._sealer.submit(_seal, self.stream_dir, number, fd))

    def _recover(self, rows: list[dict[str, Any]]) -> None:
        indexed_end: dict[int, int] = {}
        for row in rows:
            end = row["offset"] + row["size"]
            indexed_end[row["chunk"]] = max(indexed_end.get(row["chunk"], 0), end)
        for number, sealed in chunk_numbers(self.stream_dir).items():
            if sealed:
                continue
            path = self.stream_dir / f"{number:05d}{OPEN_SUFFIX}"
            end = self._recover_chunk(path, number, indexed_end.get(number, 0))
            fd = os.open(path, os.O_WRONLY)
            os.ftruncate(fd, end)
            _seal(self.stream_dir, number, fd)

    def _recover_chunk(self, path: Path, number: int, start: int) -> int:
        """Index the whole frames after `start` that have no row; returns where they end."""
        size = path.stat().st_size
        end = min(start, size)
        dctx = zstandard.ZstdDecompressor()
        with path.open("rb") as fh:
            while end < size:
                length = frame_length(fh, end, size)
                if length is None:
                    break
                fh.seek(end)
                try:
                    line = decompress_frame(dctx, fh.read(length))
                    fields = self._reindex(line)
                except (zstandard.ZstdError, ValueError):
                    break  # a torn or corrupt frame: the tail from here is dropped
                self._index(number, end, length, {**fields, "recovered": True})
                end += length
        return end


def _seal(stream_dir: Path, number: int, fd: int) -> None:
    os.fsync(fd)
    os.close(fd)
    os.rename(
        stream_dir / f"{number:05d}{OPEN_SUFFIX}", stream_dir / f"{number:05d}{SEALED_SUFFIX}"
    )
    dir_fd = os.open(stream_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
