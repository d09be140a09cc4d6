"""
What the end-of-frame check costs (issue 25, row 4): CPU seconds per GiB decoded by
`server.body.survey` (compression.zstd / backports.zstd, which reports where a frame ends),
beside python-zstandard's stream reader, which the server used before (it ends quietly at the
end of the input, mid-frame or not). Both read the same body through 1 MiB pieces.

    uv run --frozen python benchmarks/body_decode.py [MiB]
"""

from __future__ import annotations

import io
import sys
import time

import zstandard

from openruns.server.body import PIECE, DecodeLimits, _pieces, survey

MiB = 1 << 20


def _body(size: int) -> tuple[bytes, int]:
    """Metric-like NDJSON, 8 MiB of distinct lines repeated (beyond zstd -3's 2 MiB window,
    so it compresses as real rows do, not as one repeated line)."""
    import random

    rng = random.Random(25)
    lines = []
    total = 0
    while total < 8 * MiB:
        line = b'{"step": %d, "values": {"loss": %r, "reward": %r}, "id": "ep-%08x"}\n' % (
            total,
            rng.random(),
            rng.random(),
            rng.getrandbits(32),
        )
        lines.append(line)
        total += len(line)
    block = b"".join(lines)
    data = block * max(1, size // len(block))
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    pieces = [compressor.compress(data[i : i + MiB]) for i in range(0, len(data), MiB)]
    return b"".join([*pieces, compressor.flush()]), len(data)


def _stream_reader(body: bytes) -> int:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True)
    size = 0
    while out := reader.read(PIECE):
        size += len(out)
    return size


def _decoder(body: bytes) -> int:
    return sum(len(piece) for piece in _pieces(body, "zstd", PIECE))


def _cpu(fn: object, *args: object) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        fn(*args)  # type: ignore[operator]
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    size = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 512 * MiB
    body, decoded = _body(size)
    gib = decoded / (1 << 30)
    limits = DecodeLimits(max_bytes=2 * decoded, max_lines=10**9, max_line_bytes=MiB)
    measured = _cpu(survey, body, "zstd", limits)
    new = _cpu(_decoder, body)
    old = _cpu(_stream_reader, body)
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"{decoded / MiB:.0f} MiB decoded from {len(body) / MiB:.1f} MiB; load {' '.join(load)}")
    print(f"compression.zstd, frame ends checked (decode only): {new / gib:.2f} CPU s per GiB")
    print(f"python-zstandard stream reader (decode only):       {old / gib:.2f} CPU s per GiB")
    print(f"survey (decode, lines, longest line, SHA-256):      {measured / gib:.2f} CPU s per GiB")


if __name__ == "__main__":
    main()
