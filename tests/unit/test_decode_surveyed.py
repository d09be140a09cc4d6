"""body.decode_surveyed, the pass a parse worker decodes an upload in: the bytes `decode` gives
and the figures `survey` gives, for every encoding and for bodies of several frames or members,
and the same refusals as `survey`, at the same limits."""

from __future__ import annotations

import gzip

import pytest
import zstandard

from openruns.server.body import PIECE, DecodeLimits, decode, decode_surveyed, survey
from openruns.server.errors import ApiError

LIMITS = DecodeLimits(1 << 30)
# Lines of several lengths, over three pieces in all, the last one without its newline.
DATA = b"".join(b"%d %s\n" % (i, b"x" * (i % 997)) for i in range(6_000)) + b"tail"


def encoded(encoding: str) -> bytes:
    """DATA in `encoding`, as two frames (zstd) or members (gzip) end to end."""
    half = len(DATA) // 2
    if encoding == "zstd":
        return zstandard.compress(DATA[:half]) + zstandard.compress(DATA[half:])
    if encoding == "gzip":
        return gzip.compress(DATA[:half]) + gzip.compress(DATA[half:])
    return DATA


@pytest.mark.parametrize("encoding", ["identity", "zstd", "gzip"])
def test_the_bytes_of_decode_and_the_figures_of_survey(encoding: str):
    assert len(DATA) > 2 * PIECE
    body = encoded(encoding)
    data, measured = decode_surveyed(body, encoding, LIMITS)
    assert measured == survey(body, encoding, LIMITS)
    assert data == decode(body, encoding, measured.size) == DATA
    assert measured.lines == 6_001


@pytest.mark.parametrize(
    ("limits", "code"),
    [
        (DecodeLimits(len(DATA) - 1), "decompressed_body_too_large"),
        (DecodeLimits(1 << 30, max_lines=6_000), "too_many_lines"),
        (DecodeLimits(1 << 30, max_line_bytes=1_000), "line_too_large"),
    ],
)
def test_the_refusals_of_survey(limits: DecodeLimits, code: str):
    body = encoded("zstd")
    with pytest.raises(ApiError) as surveyed:
        survey(body, "zstd", limits)
    with pytest.raises(ApiError) as decoded:
        decode_surveyed(body, "zstd", limits)
    assert (decoded.value.status_code, decoded.value.code) == (413, code)
    assert decoded.value.message == surveyed.value.message


def test_a_cut_frame_is_refused():
    body = encoded("zstd")[:-3]
    with pytest.raises(ApiError) as refused:
        decode_surveyed(body, "zstd", LIMITS)
    assert (refused.value.status_code, refused.value.code) == (400, "truncated_body")
