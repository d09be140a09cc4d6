"""
Merging the batches that wait in a lane into one upload (issue 21): a hundred runs on one host
each sending a batch a second make hundreds of small requests a second, more than a small
server stores; when batches pile up behind a busy server, they go as one request instead.

    group = mergeable_prefix(waiting, CAPS)   # which of the waiting batches go together
    merged = merge_batches(group)             # one batch: their frames, one header

The merged batch is a batch like any other (rundir's format): its header lists every part's
frames in order, its index rows point into them (frame numbers shifted by the frames before),
and its Idempotency-Key is derived from the parts' keys in their order, so the same merge
replayed is the same request (the server answers it from its receipt). A different group of
the same batches is a different key: the sink therefore only merges batches that the server
has certainly not stored (never sent, or refused before anything was stored: a 429/503, a 4xx,
a refused connection), and once a merged upload may have been stored (no answer) it is kept
and retried as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..batches import Batch, header_frame, parse_header

__all__ = [
    "CAPS",
    "MERGE_KEY_PREFIX",
    "MergeCaps",
    "merge_batches",
    "merge_key",
    "mergeable_prefix",
]

MERGE_KEY_PREFIX = "merge:"


@dataclass(frozen=True)
class MergeCaps:
    """Bounds of one merged upload: its bytes as sent, its records, its batches."""

    bytes: int
    records: int
    batches: int

    def __post_init__(self) -> None:
        for name in ("bytes", "records", "batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"MergeCaps.{name} must be at least 1, not {getattr(self, name)}")


# 16 MiB: the pipeline's own batch bound (BATCH_BYTES), so a merged upload is no bigger than
# one full batch; 256 parts keep the header (and the server's check of it) small.
CAPS = MergeCaps(bytes=16 * 1024 * 1024, records=100_000, batches=256)


def mergeable_prefix(sizes: Sequence[tuple[int, int]], caps: MergeCaps = CAPS) -> int:
    """How many of the leading batches (as (bytes, records), in order) go into one upload
    within `caps`; at least 1 when there is any (a batch over the caps goes alone)."""
    count = total_bytes = total_records = 0
    for nbytes, records in sizes:
        if count and (
            count + 1 > caps.batches
            or total_bytes + nbytes > caps.bytes
            or total_records + records > caps.records
        ):
            break
        count, total_bytes, total_records = count + 1, total_bytes + nbytes, total_records + records
    return count


def merge_key(keys: Sequence[str]) -> str:
    """The Idempotency-Key of a merge of batches with these keys, in this order: the same
    parts in the same order always give the same key; any other group, another."""
    if len(keys) < 2:
        raise ValueError(f"a merge needs at least 2 keys, got {len(keys)}")
    digest = hashlib.blake2b(digest_size=16)
    for key in keys:
        data = key.encode()
        digest.update(len(data).to_bytes(4, "little") + data)  # "ab"+"c" is not "a"+"bc"
    return MERGE_KEY_PREFIX + digest.hexdigest()


def merge_batches(batches: Sequence[Batch]) -> Batch:
    """One batch holding the records of `batches` (one stream, at least 2), in order: their
    data frames as they are (no copy, no recompression), under one header."""
    if len(batches) < 2:
        raise ValueError(f"merge_batches needs at least 2 batches, got {len(batches)}")
    stream = batches[0].stream
    frames: list[Any] = []
    rows: list[dict[str, Any]] | None = None
    data: list[bytes] = []
    records = 0
    for batch in batches:
        if batch.stream != stream:
            raise ValueError(f"batches of streams {stream!r} and {batch.stream!r} cannot merge")
        header, length = parse_header(batch.parts[0])
        if length != len(batch.parts[0]):
            raise ValueError(f"batch {batch.key}: its first part is not its header frame alone")
        if "rows" in header:
            shift = len(frames)
            rows = [] if rows is None else rows
            rows.extend({**row, "frame": row["frame"] + shift} for row in header["rows"])
        frames.extend(header["frames"])
        data.extend(batch.parts[1:])
        records += batch.records
    merged: dict[str, Any] = {
        "v": 1,
        "key": merge_key([b.key for b in batches]),
        "stream": stream,
        "records": records,
        "frames": frames,
    }
    if rows is not None:
        merged["rows"] = rows
    return Batch(stream, merged["key"], records, [header_frame(merged), *data])
