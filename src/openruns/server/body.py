"""
Bulk request bodies: read with a size cap, decode with bounds, split into NDJSON objects.

Decoding is bounded in memory and work, not only in output size. `survey` decodes a body as a
stream, through a window of at most PIECE bytes, keeping nothing: it counts the output's
bytes, its lines (blank ones included) and the longest line, hashes it, and refuses (413) as
soon as one passes its limit. Only a body that passed is decoded into memory (`decompress`),
so a bomb costs a window of memory and a bounded amount of decoding, never its expansion: a
few hundred bytes that expand to a billion blank lines stop after `max_lines` newlines,
counted in C.

Every encoded body must end where its encoding says it ends: a gzip member or a zstd frame cut
short is refused (400 `truncated_body`), never taken for its decodable prefix (issue 25).
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from .admission import Ticket
from .errors import ApiError, bad_request, too_large

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = [
    "ENCODINGS",
    "INFLATED_TOO_LARGE",
    "DecodeLimits",
    "Survey",
    "decode",
    "decode_surveyed",
    "decoded_pieces",
    "decompress",
    "iter_objects",
    "stream_objects",
    "read_body",
    "survey",
]

ENCODINGS = ("zstd", "gzip", "identity")
INFLATED_TOO_LARGE = "decompressed_body_too_large"  # the 413's code past `max_bytes`
PIECE = 1 << 20
# The most memory a zstd frame may ask for its window (zstd -19 uses 8 MiB, --ultra -22 up
# to 128 MiB): a bomb cannot make the server allocate more for it.
MAX_ZSTD_WINDOW = 1 << 25


@dataclass(frozen=True)
class DecodeLimits:
    """What one upload may decode to: bytes, lines (blank ones count), bytes of one line."""

    max_bytes: int
    max_lines: int = 1_000_000
    max_line_bytes: int = 64 << 20


@dataclass(frozen=True)
class Survey:
    """A decoded body, measured: its bytes, its lines and the SHA-256 (hex) of its bytes."""

    size: int
    lines: int
    digest: str


async def read_body(request: Request, limit: int, ticket: Ticket) -> bytes:
    """The raw body; 413 past `limit` bytes. The ticket counts every piece as it arrives and
    learns when the body is in hand."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        ticket.add(len(chunk))
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _body_too_large(limit)
    ticket.body_read()
    return b"".join(chunks)  # one copy of the body, however many chunks it came in


def survey(body: bytes, encoding: str | None, limits: DecodeLimits) -> Survey:
    """Measure the decoded body without keeping it (see the module); 413 past a limit, 415 an
    unknown encoding, 400 a corrupt one."""
    return _measure(body, encoding, limits, None)


def decode_surveyed(
    body: bytes, encoding: str | None, limits: DecodeLimits
) -> tuple[bytes, Survey]:
    """The body decoded and measured in one pass, as `survey` measures it (the same refusals,
    as soon as a limit is passed). Its memory is not the window of `survey`: the pieces, up to
    `limits.max_bytes` and one more, and while they are joined a second copy (a parse worker,
    whose bound is 32 MiB, decodes once this way)."""
    kept: list[bytes] = []
    measured = _measure(body, encoding, limits, kept)
    return (kept[0] if len(kept) == 1 else b"".join(kept)), measured


def _measure(
    body: bytes, encoding: str | None, limits: DecodeLimits, kept: list[bytes] | None
) -> Survey:
    hasher = hashlib.sha256()
    size = lines = 0
    line = 0  # bytes of the line under way
    # Pieces no longer than a line may be: only a line spanning pieces can be too long.
    for piece in _pieces(body, encoding, min(PIECE, max(1, limits.max_line_bytes))):
        hasher.update(piece)
        size += len(piece)
        if size > limits.max_bytes:
            raise _inflated_too_large(limits.max_bytes)
        if kept is not None:
            kept.append(piece)
        newlines = piece.count(b"\n")
        if newlines:
            lines += newlines
            if lines > limits.max_lines:
                raise _too_many_lines(limits.max_lines)
            line += piece.find(b"\n")
            if line > limits.max_line_bytes:
                raise _line_too_long(limits.max_line_bytes)
            line = len(piece) - piece.rfind(b"\n") - 1
        else:
            line += len(piece)
        if line > limits.max_line_bytes:
            raise _line_too_long(limits.max_line_bytes)
    if line:
        lines += 1
        if lines > limits.max_lines:
            raise _too_many_lines(limits.max_lines)
    return Survey(size, lines, hasher.hexdigest())


def decompress(body: bytes, encoding: str | None, limits: DecodeLimits | int) -> bytes:
    """The body decoded (`Content-Encoding: encoding`), once `survey` has found it within
    `limits` (a bare int: a byte cap, the other limits their defaults)."""
    if isinstance(limits, int):
        limits = DecodeLimits(limits)
    return decode(body, encoding, survey(body, encoding, limits).size)


def decode(body: bytes, encoding: str | None, size: int) -> bytes:
    """The body decoded into memory, `size` bytes as `survey` measured (no limit checked):
    one piece of `size` bytes a frame (a gzip member), so a body of one frame is decoded
    straight into the bytes returned (in pieces of PIECE, copied into a buffer and then out of
    it, a 7.8 MB upload took 15 ms to decode, now 6)."""
    if (encoding or "identity").strip().lower() == "identity":
        return body
    pieces = list(_pieces(body, encoding, max(1, size)))
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def decoded_pieces(body: bytes, encoding: str | None) -> Iterator[bytes]:
    """The decoded body in pieces of at most PIECE bytes, once `survey` has found it within
    its limits (nothing is checked here)."""
    return _pieces(body, encoding, PIECE)


def _pieces(body: bytes, encoding: str | None, piece: int) -> Iterator[bytes]:
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        view = memoryview(body)
        return (bytes(view[i : i + piece]) for i in range(0, len(body), piece))
    if name == "zstd":
        return _unzstd(body, piece)
    if name in ("gzip", "x-gzip"):
        return _gunzip(body, piece)
    raise ApiError(
        415,
        "unsupported_encoding",
        f"Content-Encoding {encoding!r} is not supported; use one of {', '.join(ENCODINGS)}",
    )


def _unzstd(body: bytes, piece: int) -> Iterator[bytes]:
    # One decompressor per frame (concatenated frames are valid zstd). python-zstandard's
    # stream reader ends quietly at the end of the input, mid-frame or not; this decoder says
    # whether the frame ended (`eof`) and bounds each call's output to `piece`.
    options: dict[int, int] = {
        zstd.DecompressionParameter.window_log_max: MAX_ZSTD_WINDOW.bit_length() - 1
    }
    data = body
    try:
        while data:
            decoder = zstd.ZstdDecompressor(options=options)
            out = decoder.decompress(data, piece)
            while True:
                if out:
                    yield out
                if decoder.eof or decoder.needs_input:
                    break
                out = decoder.decompress(b"", piece)
            if not decoder.eof:
                raise _truncated("zstd", "frame")
            data = decoder.unused_data
    except zstd.ZstdError as exc:
        raise bad_request("invalid_body", f"the body is not valid zstd: {exc}") from exc


def _gunzip(body: bytes, piece: int) -> Iterator[bytes]:
    data = body
    try:
        while data:  # one gzip member per pass (concatenated members are valid gzip)
            inflater = zlib.decompressobj(wbits=31)
            while not inflater.eof:
                out = inflater.decompress(data, piece)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if not data and not out:
                    break
            if not inflater.eof:
                raise _truncated("gzip", "member")
            data = inflater.unused_data
    except zlib.error as exc:
        raise bad_request("invalid_body", f"the body is not valid gzip: {exc}") from exc


def stream_objects(pieces: Iterable[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """
    (line number, object) for every non-blank NDJSON line of a body decoded piece by piece
    (`decoded_pieces`), as `iter_objects` gives them: only the line under way is carried from
    one piece to the next, so the whole body is never in memory.
    """
    tail = b""
    lines = 0  # lines of the body before `tail`
    for piece in pieces:
        data = tail + piece if tail else piece
        end = data.rfind(b"\n")
        if end < 0:
            tail = data
            continue
        whole = data[:end]
        for lineno, _, _, value in iter_objects(whole, lines + 1):
            yield lineno, value
        lines += whole.count(b"\n") + 1
        tail = data[end + 1 :]
    for lineno, _, _, value in iter_objects(tail, lines + 1):
        yield lineno, value


def iter_objects(
    data: bytes, first_line: int = 1
) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """
    (line number, offset, length, object) for every non-blank NDJSON line, numbered from
    `first_line`; 400 naming the line when one is not a JSON object. Offsets and lengths
    exclude the newline. A blank line costs a comparison, never a parse.
    """
    view = memoryview(data)  # lines are parsed in place, never copied out of the body
    offset = 0
    lineno = first_line - 1
    while offset <= len(data):
        end = data.find(b"\n", offset)
        if end < 0:
            end = len(data)
        lineno += 1
        start, offset = offset, end + 1
        if data[start : start + 1] != b"{" and not data[start:end].strip():
            continue  # blank lines are allowed
        try:
            value = orjson.loads(view[start:end])
        except orjson.JSONDecodeError as exc:
            raise bad_request("invalid_ndjson", f"line {lineno}: invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise bad_request(
                "invalid_ndjson",
                f"line {lineno}: expected a JSON object, got {_json_type(value)}",
            )
        yield lineno, start, end - start, value


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _truncated(encoding: str, unit: str) -> ApiError:
    return bad_request(
        "truncated_body",
        f"the {encoding} body ends inside a {unit}: it was cut short; nothing was stored, "
        "send the whole body again",
    )


def _body_too_large(limit: int) -> ApiError:
    return too_large("body_too_large", f"the request body is over the limit of {limit} bytes")


def _inflated_too_large(cap: int) -> ApiError:
    return too_large(
        INFLATED_TOO_LARGE,
        f"the decompressed body is over the limit of {cap} bytes; send smaller batches",
    )


def _too_many_lines(limit: int) -> ApiError:
    return too_large(
        "too_many_lines",
        f"the decompressed body has more than {limit} lines (blank lines count); "
        "send smaller batches",
    )


def _line_too_long(limit: int) -> ApiError:
    return too_large(
        "line_too_large",
        f"a line of the decompressed body is longer than {limit} bytes; one record per line, "
        "each at most that long",
    )
