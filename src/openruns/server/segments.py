"""
Episode segments: the blob one episodes upload becomes, and its index rows. Two ways in:

- `check_batch`: the SDK's upload, a batch in the run-directory format (openruns.rundir): a
  header frame (the batch's key, its frames' sizes and one index row per record), then zstd
  frames cut for single-record reads. Its frames are stored as they are, never decompressed:
  the checks are the cheap ones (every frame a zstd frame of the stated length, carrying its
  content size and a checksum, and the rows consistent with the frames and within limits). A
  client that lies in its rows or its frames' contents can only garble its own run (readers get
  a clear error, or another record of the same run), never another run or the server.
- `build_segment`: NDJSON from any other client (curl, the Prime-compatible routes): parsed,
  indexed and compressed here into frames of about FRAME_BYTES of input (a line is never split;
  a bigger line gets a frame of its own).
- `pack_records`: records already indexed, framed the same way into a new blob with their new
  places (retention rewrites a segment with the records it keeps: server/retention/).

Either way `zstd -dc segment` gives the NDJSON back, and an index row locates its record by its
frames (offset and length in the blob) and its line in them, decompressed, so reading one
record decompresses its own frames, never the whole segment. Each row also keeps the digest of
those frames' bytes (`frames_digest`), taken here from the bytes about to be written, so every
read can tell the stored bytes from any others (segment_reads.py).
"""

from __future__ import annotations

import hashlib
import io
import math
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import zstandard

from ..batches import FRAME_BYTES, BatchFormatError, check_frames, parse_header
from ..records import index_fields
from .body import iter_objects
from .errors import bad_request, too_large
from .store.metrics import MAX_STEP

__all__ = [
    "FRAME_BYTES",
    "Segment",
    "blob_key_for",
    "build_segment",
    "check_batch",
    "check_steps",
    "frames_digest",
    "is_step",
    "iter_segment",
    "pack_records",
    "read_record",
]

MAX_ID_CHARS = 256
MAX_ENV_CHARS = 1024
MAX_KIND_CHARS = 16
# Where a record says its step (records.record_step reads them in this order).
_STEP_FIELDS = (("run", "work", "step"), ("step",))


@dataclass
class Segment:
    blob: bytes
    rows: list[dict[str, Any]]


def frames_digest(data: bytes | memoryview) -> bytes:
    """The digest an index row keeps of its record's frames (the blob's bytes it names)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def _with_digests(segment: Segment) -> Segment:
    """`segment` with each row's frames_digest (rows sharing frames share the work)."""
    view = memoryview(segment.blob)
    done: dict[tuple[int, int], bytes] = {}
    for row in segment.rows:
        span = (row["frame_offset"], row["frame_length"])
        if span not in done:
            done[span] = frames_digest(view[span[0] : span[0] + span[1]])
        row["frames_digest"] = done[span]
    return segment


# -- the SDK's batches ------------------------------------------------------------------------


def check_batch(
    body: bytes, run_kind: str, max_decompressed: int, max_record: int
) -> tuple[dict[str, Any], Segment]:
    """(header, segment) of a batch upload, its frames kept as sent; 400 says what is wrong,
    413 names a record longer than `max_record` bytes once decompressed (the limit of every
    other upload path: its row's length says it, no decompression needed; issue 20)."""
    try:
        header, start = parse_header(body)
        frames = check_frames(memoryview(body)[start:], header.get("frames"))
    except BatchFormatError as exc:
        raise bad_request("invalid_batch", str(exc)) from exc
    if sum(size for _, size in frames) > max_decompressed:
        raise too_large(
            "decompressed_body_too_large",
            f"the batch's frames hold more than {max_decompressed} bytes; send smaller batches",
        )
    rows = header.get("rows")
    records = header.get("records")
    if not isinstance(rows, list) or type(records) is not int or len(rows) != records:
        raise bad_request("invalid_batch", "the header needs one row per record")
    starts, ends = [], []  # each frame's bytes in the blob, and its content's end (cumulative)
    position = content = 0
    for length, size in frames:
        starts.append(position)
        position += length
        content += size
        ends.append(content)
    index = [_batch_row(i, row, frames, starts, ends, run_kind) for i, row in enumerate(rows)]
    for row in index:
        if row["length"] > max_record:
            raise too_large(
                "record_too_large",
                f"record {row['episode_id']!r} is {row['length']} bytes once decompressed, "
                f"over the limit of {max_record} bytes for one record (--max-record-mib)",
            )
    return header, _with_digests(Segment(body[start:], index))


def _batch_row(
    i: int,
    row: Any,
    frames: list[tuple[int, int]],
    starts: list[int],
    ends: list[int],
    run_kind: str,
) -> dict[str, Any]:
    def bad(message: str) -> Exception:
        return bad_request("invalid_batch", f"row {i}: {message}")

    if not isinstance(row, dict):
        raise bad("expected an object")
    episode_id = row.get("id")
    if not isinstance(episode_id, str) or not 0 < len(episode_id) <= MAX_ID_CHARS:
        raise bad(f"id must be a string of 1 to {MAX_ID_CHARS} characters")
    step = row.get("step")
    if step is not None and not is_step(step):
        raise bad(f"step must be an integer from 0 to {MAX_STEP} or null, got {step!r}")
    kind, subset = row.get("kind"), row.get("subset")
    for name, value, limit in (("kind", kind, MAX_KIND_CHARS), ("subset", subset, 32)):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= limit):
            raise bad(f"{name} must be a string of 1 to {limit} characters or null")
    env = row.get("env")
    if env is not None and (not isinstance(env, str) or len(env) > MAX_ENV_CHARS):
        raise bad(f"env must be a string of at most {MAX_ENV_CHARS} characters or null")
    ok = row.get("ok")
    if ok is not None and type(ok) is not bool:
        raise bad("ok must be true, false or null")
    tokens = row.get("tokens")
    if tokens is not None and (type(tokens) is not int or not 0 <= tokens <= MAX_STEP):
        raise bad("tokens must be a non-negative integer or null")
    reward, duration = _finite(row.get("reward")), _finite(row.get("duration"))
    if reward is False or duration is False:
        raise bad("reward and duration must be finite numbers or null")
    frame, offset, length = row.get("frame"), row.get("offset"), row.get("length")
    if not (_natural(frame) and _natural(offset) and _natural(length)):
        raise bad("frame, offset and length must be non-negative integers")
    if frame >= len(frames) or offset >= frames[frame][1]:
        raise bad("its line does not start in the frame it names")
    end = (ends[frame] - frames[frame][1]) + offset + length  # in the batch's content
    last = frame
    while last < len(frames) - 1 and ends[last] < end:
        last += 1
    if end > ends[last]:
        raise bad("its line runs past the last frame")
    return {
        "episode_id": episode_id,
        "step": step,
        "kind": kind or run_kind,
        "subset": subset,
        "reward": reward,
        "env": env,
        "ok": ok,
        "tokens": tokens,
        "duration": duration,
        "frame_offset": starts[frame],
        "frame_length": starts[last] + frames[last][0] - starts[frame],
        "offset": offset,
        "length": length,
    }


def _natural(value: object) -> TypeGuard[int]:
    """A non-negative int (not a bool, not a float)."""
    return type(value) is int and value >= 0


def _finite(value: Any) -> float | None | bool:
    """The value as a float, None for null, False when it is not a finite number."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        return False
    return float(value)


# -- NDJSON from other clients ----------------------------------------------------------------


def build_segment(data: bytes, run_kind: str | None = None) -> Segment:
    """Compress `data` (NDJSON objects) into a segment and index it; 400 names a bad line. A
    record that says no kind is indexed with `run_kind` (its run's)."""
    compressor = zstandard.ZstdCompressor(level=1, write_checksum=True)
    frames: list[bytes] = []
    rows: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # rows of the frame being built: input bytes start..end
    start = end = size = 0

    def seal() -> None:
        nonlocal size
        chunk = data[start:end]
        frame = compressor.compress(chunk if chunk.endswith(b"\n") else chunk + b"\n")
        for row in pending:
            row["frame_offset"] = size
            row["frame_length"] = len(frame)
        frames.append(frame)
        size += len(frame)
        pending.clear()

    for lineno, offset, length, record in iter_objects(data):
        if pending and offset + length - start > FRAME_BYTES:
            seal()
        if not pending:
            start = offset
        row = _index_row(lineno, record, run_kind)
        row["offset"] = offset - start
        row["length"] = length
        pending.append(row)
        rows.append(row)
        end = offset + length + 1
    if pending:
        seal()
    return _with_digests(Segment(b"".join(frames), rows))


def pack_records(records: list[bytes]) -> Segment:
    """`records` (JSON lines without their newline) framed like `build_segment`'s: a row per
    record with only its new place (frame_offset, frame_length, offset, length, digest)."""
    compressor = zstandard.ZstdCompressor(level=1, write_checksum=True)
    frames: list[bytes] = []
    rows: list[dict[str, Any]] = []
    pending: list[bytes] = []
    pending_rows: list[dict[str, Any]] = []
    size = used = 0

    def seal() -> None:
        nonlocal size, used
        frame = compressor.compress(b"".join(pending))
        for row in pending_rows:
            row["frame_offset"], row["frame_length"] = size, len(frame)
        frames.append(frame)
        size += len(frame)
        pending.clear()
        pending_rows.clear()
        used = 0

    for record in records:
        if pending and used + len(record) + 1 > FRAME_BYTES:
            seal()
        row = {"offset": used, "length": len(record)}
        pending.append(record + b"\n")
        pending_rows.append(row)
        rows.append(row)
        used += len(record) + 1
    if pending:
        seal()
    return _with_digests(Segment(b"".join(frames), rows))


def blob_key_for(run_seq: int, stream: str) -> str:
    """A new segment blob's key: under the run's folder `runs/<seq>/` (deletion.py removes
    the folder), never reused."""
    return f"runs/{run_seq}/{stream}/{secrets.token_hex(12)}.ndjson.zst"


def is_step(value: Any) -> bool:
    """Whether `value` is a step as metrics have them: an integer from 0 to MAX_STEP (not a
    boolean, a float or a string)."""
    return type(value) is int and 0 <= value <= MAX_STEP


def check_steps(lineno: int, record: dict[str, Any]) -> None:
    """400 naming the field when a record says a step that is not one (null: none said)."""
    for path in _STEP_FIELDS:
        value: Any = record
        for name in path:
            value = value.get(name) if isinstance(value, dict) else None
        if value is not None and not is_step(value):
            raise bad_request(
                "invalid_record",
                f"line {lineno}: {'.'.join(path)} must be an integer from 0 to {MAX_STEP} or "
                f"null, got {value!r}",
            )


def _index_row(lineno: int, record: dict[str, Any], run_kind: str | None) -> dict[str, Any]:
    check_steps(lineno, record)
    try:
        fields = index_fields(record, None)
    except (TypeError, ValueError, OverflowError) as exc:
        raise bad_request(
            "invalid_record", f"line {lineno}: cannot index the record: {exc}"
        ) from exc
    episode_id = fields["id"] or uuid.uuid4().hex
    if len(episode_id) > MAX_ID_CHARS:
        raise bad_request(
            "invalid_record", f"line {lineno}: id is longer than {MAX_ID_CHARS} characters"
        )
    step = fields["step"]
    for name, limit in (("kind", MAX_KIND_CHARS), ("subset", 32)):
        if fields[name] is not None and len(fields[name]) > limit:
            raise bad_request(
                "invalid_record", f"line {lineno}: {name} is longer than {limit} characters"
            )
    tokens = fields["tokens"]
    return {
        "episode_id": episode_id,
        "kind": fields["kind"] or run_kind,  # what the record says, else its run's kind
        "subset": fields["subset"],
        "step": step,
        "reward": fields["reward"],
        "env": fields["env"],
        "ok": fields["ok"],
        "tokens": tokens if tokens is not None and 0 <= tokens <= MAX_STEP else None,
        "duration": fields["duration"],
    }


# -- reading ----------------------------------------------------------------------------------


def read_record(frames: bytes, offset: int, length: int) -> bytes:
    """One record's JSON from its (compressed) frames."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(frames), read_across_frames=True)
    _read_exactly(reader, offset)  # up to about a MiB of other lines before this one
    return _read_exactly(reader, length)


def _read_exactly(reader: Any, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        piece = reader.read(n - len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


def iter_segment(blob: bytes, piece: int = 1 << 20) -> Iterator[bytes]:
    """The segment's NDJSON, decompressed, in pieces."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True)
    while chunk := reader.read(piece):
        yield chunk
