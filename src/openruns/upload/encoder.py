"""
Turning records and metric rows into NDJSON, on the encoder threads.

orjson holds the GIL for a whole call (1.3-4 ms per MB here), and so does any copy of a big
bytes object (`b"".join`, `line + b"\\n"`). A multi-MB episode encoded in one call, or joined
into one buffer, would stall the producer's threads, and an asyncio loop among them, for tens of
ms. So a record is encoded as a stream of pieces of at most about PIECE_BYTES (its envelope,
then each trace, a long trace's nodes a slice at a time), the thread yields the GIL between
pieces, and the pieces are never joined: they go one by one into the zstd compressor (which
releases the GIL).

The concatenated pieces are the JSON document `orjson.dumps(record)` gives, except that an
episode's `traces` key (and a trace's `nodes`) moves to the end of its object, and values JSON
cannot hold are converted by a `Coercer` (numpy through orjson's numpy option, tensors and
arrays by `.tolist()`, bytes as base64, models as mappings, anything else as `str()`).
"""

from __future__ import annotations

import base64
import logging
import numbers
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

__all__ = [
    "PIECE_BYTES",
    "Coercer",
    "Piece",
    "encode_metrics_row",
    "encode_record",
    "encode_row",
    "iter_pieces",
    "yield_gil",
]

logger = logging.getLogger("openruns")

Piece = bytes | memoryview
Default = Callable[[Any], Any] | None
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
PIECE_BYTES = 64 * 1024  # ~0.1 ms of orjson: the longest a producer waits for the GIL
_SPLIT_KEYS = ("traces", "nodes")
_MAX_DEPTH = 200  # orjson refuses to nest deeper than 254


def encode_metrics_row(step: int | None, ts: float, values: Mapping[str, Any]) -> list[Piece]:
    """A metrics row; `step` None: a row keyed by its time."""
    return [orjson.dumps({"step": step, "ts": ts, "values": values}, option=_OPTIONS), b"\n"]


def encode_row(row: Mapping[str, Any]) -> list[Piece]:
    """A small mapping (an annotation) as one NDJSON line."""
    return [orjson.dumps(row, option=_OPTIONS), b"\n"]


def encode_record(record: Mapping[str, Any], default: Default = None) -> list[Piece]:
    """One NDJSON line for a record, as pieces (see the module docstring)."""
    return list(iter_pieces(record, default))


def iter_pieces(record: Mapping[str, Any], default: Default = None) -> Iterator[Piece]:
    """
    The record's JSON followed by a newline, as pieces of at most about PIECE_BYTES each (one
    element of a list can be bigger, e.g. a node holding one huge message). With a `Coercer` as
    `default`, encoding never fails half-way: what JSON cannot hold is converted and counted.
    """
    yield from _pieces(record, default)
    yield b"\n"


def _pieces(value: Mapping[str, Any], default: Default) -> Iterator[Piece]:
    split = [k for k in _SPLIT_KEYS if isinstance(value.get(k), list) and value[k]]
    if not split:
        yield _dumps(value, default)
        return
    head = _dumps({k: v for k, v in value.items() if k not in split}, default)
    yield memoryview(head)[:-1]
    first = len(head) == 2  # "{}": no key before the split ones
    for key in split:
        yield (b"" if first else b",") + orjson.dumps(key) + b":["
        first = False
        yield from _list_pieces(value[key], default)
        yield b"]"
    yield b"}"


def _list_pieces(items: list[Any], default: Default) -> Iterator[Piece]:
    """Elements, comma-separated: a splittable one (a trace with nodes) piece by piece, runs of
    others in slices whose length adapts to the size of the last slice."""
    i, step, n = 0, 1, len(items)
    while i < n:
        if i:
            yield b","
        if _splittable(items[i]):
            yield from _pieces(items[i], default)
            i += 1
            continue
        j = i + 1
        while j < n and j - i < step and not _splittable(items[j]):
            j += 1
        piece = _dumps(items[i:j], default)
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


def _dumps(value: Any, default: Default) -> bytes:
    try:
        out = orjson.dumps(value, default=default, option=_OPTIONS)
    except TypeError:
        if not isinstance(default, Coercer):
            raise
        # What `default` cannot reach: integers beyond 64 bits, tuple keys, deep nesting.
        out = orjson.dumps(default.sanitize(value), default=default, option=_OPTIONS)
    yield_gil()
    return out


class Coercer:
    """
    orjson's `default` for records: a JSON form for each value orjson cannot encode, counted
    by what was converted (`converted`, e.g. {"bytes as base64": 3}), each kind named once in a
    warning. Used from one encoder thread.
    """

    def __init__(self, converted: dict[str, int] | None = None):
        self.converted = {} if converted is None else converted

    def __call__(self, value: Any) -> Any:
        kind = _type_name(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            self.count(f"{kind} as base64")
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            self.count(f"{kind} as int")
            return int(value)
        if isinstance(value, numbers.Real):
            self.count(f"{kind} as float")
            return float(value)
        for method, how in (("tolist", "list"), ("to_record", "mapping")):
            convert = getattr(value, method, None)
            if callable(convert):
                self.count(f"{kind} as {how} ({method}())")
                return _converted(convert, value)
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump):
            self.count(f"{kind} as mapping (model_dump())")
            return _converted(lambda: model_dump(mode="json"), value)
        if isinstance(value, Mapping):
            self.count(f"{kind} as mapping")
            return dict(value)
        if isinstance(value, (set, frozenset)):
            self.count(f"{kind} as list")
            return list(value)
        self.count(f"{kind} as str()")
        return _text(value)

    def sanitize(self, value: Any, depth: int = 0) -> Any:
        """A copy of `value` that orjson can encode with this `default` (slow path)."""
        if depth > _MAX_DEPTH:
            self.count("nesting deeper than 200 as str()")
            return _text(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if -(2**63) <= value < 2**64:
                return value
            self.count("int beyond 64 bits as str()")
            return str(value)
        if isinstance(value, Mapping):
            out = {}
            for key, item in value.items():
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    self.count(f"{_type_name(key)} key as str()")
                    key = _text(key)
                out[key] = self.sanitize(item, depth + 1)
            return out
        if isinstance(value, (list, tuple)):
            return [self.sanitize(item, depth + 1) for item in value]
        return value

    def count(self, what: str) -> None:
        self.converted[what] = self.converted.get(what, 0) + 1
        if self.converted[what] == 1:
            logger.warning(
                "openruns: a record holds values JSON cannot hold; stored %s (each kind of "
                "conversion is named once; counted in the run's losses as converted_values)",
                what,
            )


def _converted(convert: Callable[[], Any], value: Any) -> Any:
    try:
        return convert()
    except Exception:
        return _text(value)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{_type_name(value)} object>"


def _type_name(value: Any) -> str:
    cls = type(value)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__name__}"


YIELD_EVERY = 0.0001
_yields = threading.local()


def yield_gil() -> None:
    """
    Let a thread waiting for the GIL (the producer, its event loop) run now, instead of after
    the interpreter's 5 ms switch interval: sleep(0) releases the GIL. Called between pieces of
    work; each thread sleeps at most once per YIELD_EVERY seconds of its own work, so small
    pieces cost nothing and no thread holds the GIL much longer than that.
    """
    now = time.perf_counter()
    if now - getattr(_yields, "last", 0.0) >= YIELD_EVERY:
        time.sleep(0)
        _yields.last = time.perf_counter()
