"""
Reading stored records: what a read returns is what was stored, or a clear error.

A segment is a blob of zstd frames whose decompressed concatenation is the records as NDJSON;
an index row locates a record by its frames (bytes of the blob) and its line inside them, and
keeps the digest of those frames' bytes as they were written (`frames_digest`, segments.py).
Blobs are written whole before their index rows commit, so a blob that does not match them is
damage from outside (a disk, a restore, someone's `rm` or `cp`), never a normal state.

The rule for every read (docs/decisions.md, "Integrity of reads"): the frames' bytes are
compared with the row's digest before anything is decompressed. A match proves they are the
bytes written at ingest, so the record decoded from them is the one that was stored; anything
else (a flipped byte, a cut blob, another run's segment in its place) is `DamagedSegment`: 410
`damaged_segment` naming the blob. Rows indexed before digests were kept (migration 0012) are
read by decompressing their whole frames, which verifies each frame's checksum, and their
record must be a whole line carrying the row's id.

- `read_record`: one record (`GET /runs/{id}/episodes/{eid}`), decompressing only up to it.
- `RecordReader`: many records (exports, previews, the search index), each group of frames
  read, verified and decompressed once while consecutive rows share it.
- `iter_frames`, `iter_lines`: a blob's frames (lines), each frame verified against its
  checksum (`server check`; the Prime wire's sample objects, which have no index rows).

`openruns server check --verify` (check.py) finds such blobs ahead of the readers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import zstandard

from .errors import ApiError
from .segments import frames_digest
from .segments import read_record as decode_record
from .store.blobs import BlobStore

__all__ = [
    "DamagedSegment",
    "Location",
    "RecordReader",
    "WholeBlobs",
    "iter_frames",
    "iter_lines",
    "read_frames",
    "read_record",
]

_CHUNK = 1 << 17
# The reasons a read gives, fixed texts so an export's account groups records by them.
DIGEST_MISMATCH = "its bytes are not the ones stored (they do not match the index's digest)"
NOT_THE_RECORD = "the record at the indexed place is not the indexed one"


class DamagedSegment(ApiError):
    """A stored segment cannot be read back: 410 naming the blob and the damage."""

    def __init__(self, blob_key: str, reason: str):
        super().__init__(
            410,
            "damaged_segment",
            f"the stored segment {blob_key} is damaged ({reason}); the server's operator can "
            "list damaged blobs with `openruns server check --verify`",
        )
        self.blob_key = blob_key
        self.reason = reason


class RangeReader(Protocol):
    def get_range(self, key: str, offset: int, length: int) -> bytes: ...


class WholeBlobs:
    """Ranges of blobs read whole, the last one held: an export reads each segment once
    (rather than a request per group of frames). A missing blob stays missing."""

    def __init__(self, blobs: BlobStore):
        self.blobs = blobs
        self._held: tuple[str, bytes | None] | None = None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if self._held is None or self._held[0] != key:
            try:
                self._held = (key, self.blobs.get(key))
            except FileNotFoundError:
                self._held = (key, None)
        data = self._held[1]
        if data is None:
            raise FileNotFoundError(key)
        return data[offset : offset + length]


@dataclass(frozen=True)
class Location:
    """Where a record is: its zstd frames in a segment blob, its line inside them, and what
    to check them against (the digest of the frames; the id, for rows without a digest)."""

    blob_key: str
    frame_offset: int
    frame_length: int
    offset: int
    length: int
    frames_digest: bytes | None = None
    episode_id: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Location:
        """The location of an index row as the store's queries give it."""
        digest = row.get("frames_digest")
        return cls(
            row["blob_key"],
            row["frame_offset"],
            row["frame_length"],
            row["offset"],
            row["length"],
            bytes(digest) if digest is not None else None,  # PostgreSQL gives a memoryview
            row.get("episode_id", row.get("id")),
        )


def read_frames(blobs: RangeReader, blob_key: str, offset: int, length: int) -> bytes:
    """`length` bytes of a segment at `offset`; DamagedSegment when the blob is missing or
    shorter than the index says. Transient store errors (503) pass through."""
    try:
        raw = blobs.get_range(blob_key, offset, length)
    except FileNotFoundError as exc:
        raise DamagedSegment(blob_key, "the blob is missing") from exc
    if len(raw) < length:
        raise DamagedSegment(
            blob_key, f"truncated: {len(raw)} of the {length} bytes at offset {offset}"
        )
    return raw


def read_record(blobs: RangeReader, row: Mapping[str, Any]) -> bytes:
    """One record's JSON from its index row; DamagedSegment unless it is the stored one."""
    where = Location.of(row)
    raw = read_frames(blobs, where.blob_key, where.frame_offset, where.frame_length)
    if where.frames_digest is None:  # indexed before digests were kept
        return _record_in(where, _decompressed(where.blob_key, raw))
    _check_digest(where, raw)
    try:
        record = decode_record(raw, where.offset, where.length)
    except zstandard.ZstdError as exc:  # only frames a client sent that way: its own run
        raise DamagedSegment(where.blob_key, f"a frame does not decompress: {exc}") from exc
    if len(record) != where.length:
        raise DamagedSegment(where.blob_key, "the record is cut short")
    return record


class RecordReader:
    """Records of many index rows; the frames of the last one are held (read, verified and
    decompressed), so rows in storage order read each group of frames once. Blocking: call
    from a worker thread."""

    def __init__(self, blobs: RangeReader):
        self.blobs = blobs
        self._held: tuple[tuple[str, int, int], bytes | DamagedSegment] | None = None

    def record(self, where: Location) -> bytes:
        """The record's JSON; DamagedSegment unless it is the stored one."""
        span = (where.blob_key, where.frame_offset, where.frame_length)
        if self._held is None or self._held[0] != span:
            self._held = (span, self._content(where))
        content = self._held[1]
        if isinstance(content, DamagedSegment):
            raise content
        return _record_in(where, content)

    def _content(self, where: Location) -> bytes | DamagedSegment:
        try:
            raw = read_frames(self.blobs, where.blob_key, where.frame_offset, where.frame_length)
            if where.frames_digest is not None:
                _check_digest(where, raw)
            return _decompressed(where.blob_key, raw)
        except DamagedSegment as exc:
            return exc


def _check_digest(where: Location, raw: bytes) -> None:
    if frames_digest(raw) != where.frames_digest:
        raise DamagedSegment(where.blob_key, DIGEST_MISMATCH)


def _decompressed(blob_key: str, raw: bytes) -> bytes:
    """The content of the frames `raw`, each verified against its checksum."""
    try:
        return b"".join(iter_frames(raw))
    except zstandard.ZstdError as exc:
        raise DamagedSegment(blob_key, f"a frame does not decompress: {exc}") from exc


def _record_in(where: Location, content: bytes) -> bytes:
    """The record's line in its decompressed frames. A row with a digest names verified bytes,
    so only its bounds are checked; a row without one must find a whole line there, with its
    id when the record has one (index_fields' rule), or the blob is not the indexed one."""
    end = where.offset + where.length
    record = content[where.offset : end]
    if len(record) != where.length:
        raise DamagedSegment(where.blob_key, "the record is cut short")
    if where.frames_digest is not None:
        return record
    whole = (where.offset == 0 or content[where.offset - 1] == 10) and content[end : end + 1] in (
        b"\n",
        b"",
    )
    try:
        doc = orjson.loads(record) if whole else None
    except orjson.JSONDecodeError:
        doc = None
    said = str(doc.get("id", "")) if isinstance(doc, dict) else None
    if said is None or (said and where.episode_id is not None and said != where.episode_id):
        raise DamagedSegment(where.blob_key, NOT_THE_RECORD)
    return record


def iter_frames(blob: bytes) -> Iterator[bytes]:
    """The decompressed content of each zstd frame of `blob`, in order, each verified against
    its checksum before it is handed out; ZstdError at the first damaged or truncated one."""
    view = memoryview(blob)
    position = 0
    pending = b""
    while position < len(view) or pending:
        decoder = zstandard.ZstdDecompressor().decompressobj()
        out: list[bytes] = []
        data: bytes = pending
        pending = b""
        while True:
            if not data:
                if position >= len(view):
                    raise zstandard.ZstdError("the last frame is truncated")
                data = bytes(view[position : position + _CHUNK])
                position += _CHUNK
            out.append(decoder.decompress(data))
            data = b""
            if decoder.eof:
                pending = decoder.unused_data
                break
        yield b"".join(out)


def iter_lines(blob: bytes) -> Iterator[bytes]:
    """A zstd NDJSON blob with no index rows (the Prime wire's sample objects) in pieces that
    end at a line's end (a line may span frames); the part of a line in a frame found damaged
    is never handed out."""
    carry = b""
    for content in iter_frames(blob):
        data = carry + content
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield data[:cut]
    if carry.strip():
        yield carry + b"\n"
