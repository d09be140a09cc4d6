"""
Turning queued log_* calls into NDJSON batches, on the encoder threads.

orjson holds the GIL for a whole call (1.3-4 ms per MB here), and so does any copy of a big
bytes object (`b"".join`, `line + b"\\n"`). A multi-MB episode encoded in one call, or joined
into one buffer, would stall the producer's threads, and an asyncio loop among them, for tens of
ms. So a record is encoded as a stream of pieces of at most about PIECE_BYTES (its envelope,
then each trace, a long trace's nodes a slice at a time), the thread yields the GIL between
pieces, and the pieces are never joined: a batch is a list of pieces, which go one by one into
the hash and the zstd compressor (which releases the GIL).

The concatenated pieces are the JSON document `orjson.dumps(record)` gives, except that an
episode's `traces` key (and a trace's `nodes`) moves to the end of its object.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "PIECE_BYTES",
    "Batch",
    "BatchBuilder",
    "Piece",
    "encode_metrics_row",
    "encode_record",
    "encode_row",
    "iter_pieces",
    "yield_gil",
]

Piece = bytes | memoryview
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
PIECE_BYTES = 64 * 1024  # ~0.1 ms of orjson: the longest a producer waits for the GIL
_SPLIT_KEYS = ("traces", "nodes")


def encode_metrics_row(step: int | None, ts: float, values: Mapping[str, Any]) -> list[Piece]:
    """A metrics row; `step` None: a row keyed by its time."""
    return [orjson.dumps({"step": step, "ts": ts, "values": values}, option=_OPTIONS), b"\n"]


def encode_row(row: Mapping[str, Any]) -> list[Piece]:
    """A small mapping (an annotation) as one NDJSON line."""
    return [orjson.dumps(row, option=_OPTIONS), b"\n"]


def encode_record(record: Mapping[str, Any]) -> list[Piece]:
    """One NDJSON line for a record, as pieces (see the module docstring)."""
    return list(iter_pieces(record))


def iter_pieces(record: Mapping[str, Any]) -> Iterator[Piece]:
    """The record's JSON followed by a newline, as pieces of at most about PIECE_BYTES each
    (one element of a list can be bigger, e.g. a node holding one huge message)."""
    yield from _pieces(record)
    yield b"\n"


def _pieces(value: Mapping[str, Any]) -> Iterator[Piece]:
    split = [k for k in _SPLIT_KEYS if isinstance(value.get(k), list) and value[k]]
    if not split:
        yield _dumps(value)
        return
    head = _dumps({k: v for k, v in value.items() if k not in split})
    yield memoryview(head)[:-1]
    first = len(head) == 2  # "{}": no key before the split ones
    for key in split:
        yield (b"" if first else b",") + orjson.dumps(key) + b":["
        first = False
        yield from _list_pieces(value[key])
        yield b"]"
    yield b"}"


def _list_pieces(items: list[Any]) -> Iterator[Piece]:
    """Elements, comma-separated: a splittable one (a trace with nodes) piece by piece, runs of
    others in slices whose length adapts to the size of the last slice."""
    i, step, n = 0, 1, len(items)
    while i < n:
        if i:
            yield b","
        if _splittable(items[i]):
            yield from _pieces(items[i])
            i += 1
            continue
        j = i + 1
        while j < n and j - i < step and not _splittable(items[j]):
            j += 1
        piece = _dumps(items[i:j])
        yield memoryview(piece)[1:-1]
        i = j
        if len(piece) > 2 * PIECE_BYTES and step > 1:
            step //= 2
        elif len(piece) < PIECE_BYTES // 2:
            step *= 2


def _splittable(value: Any) -> bool:
    return isinstance(value, Mapping) and any(
        isinstance(value.get(k), list) and value[k] for k in _SPLIT_KEYS
    )


def _dumps(value: Any) -> bytes:
    out = orjson.dumps(value, option=_OPTIONS)
    yield_gil()
    return out


_last_yield = 0.0
YIELD_EVERY = 0.0002


def yield_gil() -> None:
    """
    Let a thread waiting for the GIL (the producer, its event loop) run now, instead of after
    the interpreter's 5 ms switch interval: sleep(0) releases the GIL. Called between pieces of
    work; it sleeps at most once per YIELD_EVERY seconds of work, so small pieces cost nothing.
    """
    global _last_yield
    now = time.perf_counter()
    if now - _last_yield >= YIELD_EVERY:
        time.sleep(0)
        _last_yield = time.perf_counter()


@dataclass
class Batch:
    """A batch of NDJSON lines of one stream: one zstd frame on disk, one request online."""

    stream: str
    parts: list[Piece]
    size: int
    count: int
    index: list[dict[str, Any]]


@dataclass
class BatchBuilder:
    stream: str
    max_bytes: int
    parts: list[Piece] = field(default_factory=list)
    size: int = 0
    index: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    started: float = 0.0

    def add(self, line: list[Piece], index_row: dict[str, Any] | None = None) -> Batch | None:
        """Add a line (its pieces); returns the batch to send when the line would overflow it."""
        length = sum(len(piece) for piece in line)
        out = None
        if self.parts and self.size + length > self.max_bytes:
            out = self.take()
        if not self.parts:
            self.started = time.monotonic()
        if index_row is not None:
            index_row["offset"] = self.size
            index_row["length"] = length - 1
            self.index.append(index_row)
        self.parts.extend(line)
        self.size += length
        self.count += 1
        return out

    def take(self) -> Batch | None:
        if not self.parts:
            return None
        batch = Batch(self.stream, self.parts, self.size, self.count, self.index)
        self.parts, self.size, self.index, self.count = [], 0, [], 0
        return batch

    def age(self) -> float:
        return time.monotonic() - self.started if self.parts else 0.0
