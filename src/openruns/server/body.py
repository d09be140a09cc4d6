"""
Bulk request bodies: read with a size cap, decompress with a cap, split into NDJSON objects.

Decompression is streamed in bounded pieces and stops as soon as the output passes the cap, so a
zip bomb costs at most `cap` bytes of memory, never its full expansion.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import zstandard
from starlette.requests import Request

from .errors import ApiError, bad_request, too_large

__all__ = ["ENCODINGS", "decompress", "iter_objects", "read_body"]

ENCODINGS = ("zstd", "gzip", "identity")
_PIECE = 1 << 20


async def read_body(request: Request, limit: int, on_chunk: Callable[[int], None]) -> bytes:
    """The raw body; 413 past `limit` bytes. `on_chunk(n)` is told of every piece received."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        on_chunk(len(chunk))
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _body_too_large(limit)
    return b"".join(chunks)  # one copy of the body, however many chunks it came in


def decompress(body: bytes, encoding: str | None, cap: int) -> bytes:
    """Decode a body sent with `Content-Encoding: encoding`; 415 unknown, 413 past `cap`."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        if len(body) > cap:
            raise _inflated_too_large(cap)
        return body
    if name == "zstd":
        return _unzstd(body, cap)
    if name in ("gzip", "x-gzip"):
        return _gunzip(body, cap)
    raise ApiError(
        415,
        "unsupported_encoding",
        f"Content-Encoding {encoding!r} is not supported; use one of {', '.join(ENCODINGS)}",
    )


def _unzstd(body: bytes, cap: int) -> bytes:
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(body), read_across_frames=True
        )
        while piece := reader.read(_PIECE):
            out += piece
            if len(out) > cap:
                raise _inflated_too_large(cap)
    except zstandard.ZstdError as exc:
        raise bad_request("invalid_body", f"the body is not valid zstd: {exc}") from exc
    return bytes(out)


def _gunzip(body: bytes, cap: int) -> bytes:
    out = bytearray()
    data = body
    try:
        while data:  # one gzip member per pass (concatenated members are valid gzip)
            inflater = zlib.decompressobj(wbits=31)
            while not inflater.eof:
                piece = inflater.decompress(data, _PIECE)
                out += piece
                if len(out) > cap:
                    raise _inflated_too_large(cap)
                data = inflater.unconsumed_tail
                if not data and not piece:
                    break
            if not inflater.eof:
                raise bad_request("invalid_body", "the gzip body is truncated")
            data = inflater.unused_data
    except zlib.error as exc:
        raise bad_request("invalid_body", f"the body is not valid gzip: {exc}") from exc
    return bytes(out)


def iter_objects(data: bytes) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """
    (line number, offset, length, object) for every non-empty NDJSON line; 400 naming the line
    when one is not a JSON object. Offsets and lengths exclude the newline.
    """
    view = memoryview(data)  # lines are parsed in place, never copied out of the body
    offset = 0
    lineno = 0
    while offset <= len(data):
        end = data.find(b"\n", offset)
        if end < 0:
            end = len(data)
        lineno += 1
        line = view[offset:end]
        start, offset = offset, end + 1
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not bytes(line).strip():
                continue  # blank lines are allowed
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


def _body_too_large(limit: int) -> ApiError:
    return too_large("body_too_large", f"the request body is over the limit of {limit} bytes")


def _inflated_too_large(cap: int) -> ApiError:
    return too_large(
        "decompressed_body_too_large",
        f"the decompressed body is over the limit of {cap} bytes; send smaller batches",
    )
