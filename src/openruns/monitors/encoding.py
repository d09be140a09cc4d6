"""
An episode as JSON in GIL-sized pieces, never joined, for a thread beside an event loop.

orjson holds the GIL for a whole call (~4 ms per MB on a busy 2-core machine), and so does any
copy of a big bytes object (`b"".join`, `line + b"\\n"`: ~0.8 ms per MB here, page faults
included). A 50 MB episode encoded in one call, or joined into one buffer, stalls every other
thread of the process, an asyncio loop among them, for 40-170 ms. So an episode is encoded as
a stream of pieces of at most ~PIECE_BYTES (its envelope, then its traces, a long trace's nodes
a slice at a time), the thread yields the GIL between pieces, and the pieces go straight into a
zstd compressor (which releases the GIL) without ever being joined.

The concatenated pieces are the JSON document `orjson.dumps(record)` gives, except that an
episode's `traces` key (and a trace's `nodes`) moves to the end of its object.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import zstandard

__all__ = ["PIECE_BYTES", "compress_record", "iter_pieces"]

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
PIECE_BYTES = 256 * 1024
_SPLIT_KEYS = ("traces", "nodes")


def iter_pieces(record: Mapping[str, Any]) -> Iterator[bytes | memoryview]:
    """The record's JSON followed by a newline, as pieces of at most about PIECE_BYTES each
    (one element of a list can be bigger, e.g. a node holding one huge message)."""
    yield from _pieces(record)
    yield b"\n"


def compress_record(
    record: Mapping[str, Any], compressor: zstandard.ZstdCompressor
) -> tuple[list[bytes], int]:
    """One zstd frame of the record's NDJSON line, as a list of parts (write them in order),
    and the line's length."""
    cobj = compressor.compressobj()
    out: list[bytes] = []
    size = 0
    for piece in iter_pieces(record):
        size += len(piece)
        chunk = cobj.compress(piece)
        if chunk:
            out.append(chunk)
    out.append(cobj.flush())
    return out, size


def _pieces(value: Mapping[str, Any]) -> Iterator[bytes | memoryview]:
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


def _list_pieces(items: list[Any]) -> Iterator[bytes | memoryview]:
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
    return isinstance(value, Mapping) and _has_split(value)


def _has_split(value: Mapping[str, Any]) -> bool:
    return any(isinstance(value.get(k), list) and value[k] for k in _SPLIT_KEYS)


def _dumps(value: Any) -> bytes:
    out = orjson.dumps(value, option=_OPTIONS)
    # sleep(0) releases the GIL, so a thread waiting for it (the producer's event loop) runs
    # now instead of after the interpreter's 5 ms switch interval.
    time.sleep(0)
    return out
