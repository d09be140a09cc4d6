"""
From encoded lines to batches in the run-directory format (rundir.py), in two halves:

    encoder thread:  FrameCutter     lines (as pieces) --> FrameInput: the pieces of one zstd
                                     frame, the index rows of records that ended in it
    sink thread:     BatchAssembler  FrameInput --> zstd frame --> Batch (header + frames)

The cutter decides every boundary, because only it sees where records end: a frame holds about
FRAME_BYTES of lines and ends where a record ends, so reading one record decompresses its own
frame; a record bigger than that starts a frame of its own and continues over as many as it
needs, handed on one frame at a time (its encoded pieces are never all in memory at once; its
compressed frames are, until its batch is sent). A batch holds at most `batch_bytes` of lines
(a bigger record streams into the batch it starts in), or less when the encoder cuts it (age,
flush, close). The assembler only compresses, on the thread that does not need the GIL for it,
and writes the batch header once the batch is complete.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import zstandard

from ..batches import FRAME_BYTES, Batch, header_frame
from ..rundir import ROW_STREAMS
from .encoder import Piece

__all__ = ["BatchAssembler", "FrameCutter", "FrameInput", "new_compressor"]


def new_compressor() -> zstandard.ZstdCompressor:
    return zstandard.ZstdCompressor(level=1, write_checksum=True)


@dataclass
class FrameInput:
    """The lines (as pieces) of one frame of a batch; rows of records that ended in it."""

    stream: str
    pieces: list[Piece]
    size: int
    rows: list[dict[str, Any]]
    records: int
    ends_batch: bool
    drop_from: int | None = None  # discard the batch's frames from this one on (a failed record)


@dataclass
class FrameCutter:
    """Encoder side, one per stream: where frames and batches of the stream begin and end."""

    stream: str
    batch_bytes: int
    frame_bytes: int = FRAME_BYTES
    _pieces: list[Piece] = field(default_factory=list)
    _size: int = 0  # bytes in the open frame
    _frame: int = 0  # index of the open frame in its batch
    _batch_size: int = 0  # bytes of lines in the batch so far
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _records: int = 0
    _since: float | None = None  # monotonic time the oldest line not yet handed on was added

    @property
    def pending_since(self) -> float | None:
        """When the oldest line still held here was added (None: nothing held)."""
        return self._since

    def add(self, pieces: Iterable[Piece], row: dict[str, Any] | None) -> Iterator[FrameInput]:
        """
        Add one line (its pieces, consumed lazily: a big record is encoded while its first
        frames are already handed on); yields the frame inputs that are complete. `row` is
        the record's index row (None for metric rows); its frame, offset and length are set.
        """
        if self._since is None:
            self._since = time.monotonic()
        held: list[Piece] = []
        held_size = 0
        big = False
        start = (0, 0)
        length = 0
        try:
            for piece in _checked(pieces):
                n = len(piece)
                length += n
                if big:
                    self._pieces.append(piece)
                    self._size += n
                    if self._size >= self.frame_bytes:
                        yield self._cut_frame(ends_batch=False)
                    continue
                held.append(piece)
                held_size += n
                if held_size > self.frame_bytes:  # a big record: it starts a frame of its own
                    if self._size:
                        yield self._cut_frame(ends_batch=False)
                    start = (self._frame, 0)
                    self._pieces, self._size, held = held, held_size, []
                    big = True
                    if self._size >= self.frame_bytes:
                        yield self._cut_frame(ends_batch=False)
        except _EncodingFailed as exc:
            if big:  # frames of this record may be handed on already: the batch ends before it
                self._pieces, self._size = [], 0
                out = self._cut_frame(ends_batch=True)
                out.drop_from = start[0]
                yield out
            raise exc.error from None
        if not big:
            if self._batch_size and self._batch_size + held_size > self.batch_bytes:
                yield self._cut_frame(ends_batch=True)  # the batch ends before this record
            elif self._size and self._size + held_size > self.frame_bytes:
                yield self._cut_frame(ends_batch=False)
            start = (self._frame, self._size)
            self._pieces.extend(held)
            self._size += held_size
        self._records += 1
        self._batch_size += length
        if row is not None:
            row["frame"], row["offset"] = start
            row["length"] = length - 1  # without the newline
            self._rows.append(row)
        if self._batch_size >= self.batch_bytes:
            yield self._cut_frame(ends_batch=True)

    def cut(self) -> FrameInput | None:
        """End the batch now (None when there is nothing to end)."""
        if not self._size and not self._records and not self._frame:
            return None
        return self._cut_frame(ends_batch=True)

    def _cut_frame(self, ends_batch: bool) -> FrameInput:
        out = FrameInput(
            self.stream, self._pieces, self._size, self._rows, self._records, ends_batch
        )
        self._pieces, self._size, self._rows, self._records = [], 0, [], 0
        if ends_batch:
            self._frame, self._batch_size, self._since = 0, 0, None
        elif out.size:
            self._frame += 1
        return out


class _EncodingFailed(Exception):
    """The pieces of a record could not be produced (`error` says why)."""

    def __init__(self, error: Exception):
        super().__init__(error)
        self.error = error


def _checked(pieces: Iterable[Piece]) -> Iterator[Piece]:
    try:
        yield from pieces
    except Exception as exc:
        raise _EncodingFailed(exc) from exc


class BatchAssembler:
    """Sink side, one per stream: compresses frame inputs and completes batches."""

    def __init__(self, stream: str):
        self.stream = stream
        self._compressor = new_compressor()  # not thread-safe: one stream, one thread
        self._chunks: list[bytes] = []  # the frames' compressed output, never joined
        self._sizes: list[list[int]] = []
        self._rows: list[dict[str, Any]] = []
        self._records = 0

    def add(self, work: FrameInput) -> Batch | None:
        """Compress one frame; returns the batch it completes, if it ends one."""
        if work.drop_from is not None:
            kept = sum(length for length, _ in self._sizes[: work.drop_from])
            self._sizes = self._sizes[: work.drop_from]
            self._chunks = _first_bytes(self._chunks, kept)
        if work.size:
            chunks = self._compress(work.pieces, work.size)
            self._chunks += chunks
            self._sizes.append([sum(len(c) for c in chunks), work.size])
        self._rows.extend(work.rows)
        self._records += work.records
        if not work.ends_batch or not (self._sizes or self._records):
            return None
        header: dict[str, Any] = {
            "v": 1,
            "key": "batch:" + secrets.token_hex(16),
            "stream": self.stream,
            "records": self._records,
            "frames": self._sizes,
        }
        if self.stream not in ROW_STREAMS:  # episodes, traces: the server keeps the frames
            header["rows"] = self._rows
        batch = Batch(self.stream, header["key"], self._records, [header_frame(header)])
        batch.parts += self._chunks
        batch.nbytes += sum(length for length, _ in self._sizes)
        self._chunks, self._sizes, self._rows, self._records = [], [], [], 0
        return batch

    def _compress(self, pieces: list[Piece], size: int) -> list[bytes]:
        """One zstd frame (content size and checksum in it) of the pieces, as output chunks:
        neither the input nor the output is ever joined."""
        obj = self._compressor.compressobj(size=size)
        out = [chunk for piece in pieces if (chunk := obj.compress(piece))]
        out.append(obj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
        return out


def _first_bytes(chunks: list[bytes], n: int) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        if n <= 0:
            break
        out.append(chunk[:n] if len(chunk) > n else chunk)
        n -= len(chunk)
    return out
