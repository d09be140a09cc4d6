"""
Turning queued log_* calls into NDJSON batches, on the encoder thread.

orjson holds the GIL for a whole call (about 1.3 ms per MB here), so a multi-MB episode encoded
in one call would stall the producer's threads, and an asyncio loop among them, for tens of ms.
An episode is therefore encoded in pieces (its envelope, then each trace, then a long trace's
nodes a slice at a time, each piece at most about PIECE_BYTES), and the thread yields the GIL
between pieces. The pieces are joined into the same JSON document one orjson call would give,
except that an episode's `traces` key (and a trace's `nodes`) moves to the end of its object.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Batch", "BatchBuilder", "encode_metrics_row", "encode_record", "yield_gil"]

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
PIECE_BYTES = 128 * 1024
_SPLIT_KEYS = ("traces", "nodes")


def encode_metrics_row(step: int, ts: float, values: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"step": step, "ts": ts, "values": values}, option=_OPTIONS) + b"\n"


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One NDJSON line for a record, encoded in GIL-sized pieces."""
    return _encode(record) + b"\n"


def _encode(value: Mapping[str, Any]) -> bytes:
    split = [k for k in _SPLIT_KEYS if isinstance(value.get(k), list) and value[k]]
    if not split:
        out = orjson.dumps(value, option=_OPTIONS)
        yield_gil()
        return out
    head = orjson.dumps({k: v for k, v in value.items() if k not in split}, option=_OPTIONS)
    parts = [head[:-1]]
    for key in split:
        if len(parts[-1]) > 1:
            parts.append(b",")
        parts.append(orjson.dumps(key) + b":[")
        parts.append(_encode_list(value[key]))
        parts.append(b"]")
    parts.append(b"}")
    return b"".join(parts)


def _encode_list(items: list[Any]) -> bytes:
    """Elements of a list, comma-joined, in slices sized to about PIECE_BYTES per orjson call."""
    pieces: list[bytes] = []
    i, step = 0, 8
    while i < len(items):
        chunk = items[i : i + step]
        if len(chunk) == 1 and isinstance(chunk[0], Mapping):
            piece = _encode(chunk[0])
        else:
            piece = orjson.dumps(chunk, option=_OPTIONS)[1:-1]
            yield_gil()
        pieces.append(piece)
        i += len(chunk)
        if len(piece) > 2 * PIECE_BYTES and step > 1:
            step //= 2
        elif len(piece) < PIECE_BYTES // 4:
            step *= 2
    return b",".join(pieces)


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
    parts: list[bytes]
    size: int
    count: int
    index: list[dict[str, Any]]


@dataclass
class BatchBuilder:
    stream: str
    max_bytes: int
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    index: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    started: float = 0.0

    def add(self, line: bytes, index_row: dict[str, Any] | None = None) -> Batch | None:
        """Add a line; returns the batch to send when the line would overflow it."""
        out = None
        if self.parts and self.size + len(line) > self.max_bytes:
            out = self.take()
        if not self.parts:
            self.started = time.monotonic()
        if index_row is not None:
            index_row["offset"] = self.size
            index_row["length"] = len(line) - 1
            self.index.append(index_row)
        self.parts.append(line)
        self.size += len(line)
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
