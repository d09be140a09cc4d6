"""
What checking every read costs (issue 25): CPU seconds per GB of records returned, on one core,
in process (no HTTP, no disk: the segment is in memory), for the three ways records are read:

1. one record at a time (`GET /runs/{id}/episodes/{eid}`), every record of the segment in a
   random order: before (decode up to the record, nothing checked), now (the frames' digest,
   then decode up to the record), and the alternative not chosen (decompress the record's
   whole frames, which verifies their checksums, then slice);
2. many records (exports, previews, search): before (the whole blob's lines, frame checksums),
   now (each row's frames checked against its digest, decompressed once, sliced);
3. ingest: what keeping the digests adds to building a segment from NDJSON (`build_segment`),
   per GB of NDJSON.

Records are production-shaped (lognormal size, median ~11 KB: text of Zipf-distributed words,
token ids and logprobs with real entropy), framed as the server frames them (1 MiB frames).

    uv run python benchmarks/read_integrity.py                # ~256 MB of records, ~2 minutes
    uv run python benchmarks/read_integrity.py --megabytes 32 # a smoke run

Results go in docs/benchmarks.md, section "Integrity of reads (issue 25)".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import time
from collections.abc import Callable

import orjson
import zstandard

from openruns.server.segment_reads import Location, RecordReader, WholeBlobs, iter_frames
from openruns.server.segment_reads import read_record as checked_read
from openruns.server.segments import build_segment
from openruns.server.segments import read_record as unchecked_decode

GB = 1e9


class _Blobs:
    """One segment in memory, as a blob store."""

    def __init__(self, key: str, data: bytes):
        self.key, self.data = key, data

    def get(self, key: str) -> bytes:
        return self.data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]


def make_ndjson(megabytes: float, rng: random.Random) -> bytes:
    words = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9)))
        for _ in range(20_000)
    ]
    weights = [1 / (rank + 1) for rank in range(len(words))]
    lines, total, i = [], 0, 0
    while total < megabytes * 1e6:
        size = min(400_000, int(rng.lognormvariate(9.9, 0.8)))  # ~11 KB of JSON at the median
        n_words = max(10, size // 14)
        record = {
            "id": f"e{i}",
            "env": "bench",
            "traces": [
                {
                    "id": "t0",
                    "reward": rng.random(),
                    "nodes": [
                        {
                            "message": {
                                "role": "assistant",
                                "content": " ".join(rng.choices(words, weights, k=n_words)),
                            }
                        },
                        {"token_ids": [rng.randrange(150_000) for _ in range(n_words // 8)]},
                        {"logprobs": [round(-rng.random() * 3, 4) for _ in range(n_words // 16)]},
                    ],
                }
            ],
        }
        line = orjson.dumps(record) + b"\n"
        lines.append(line)
        total += len(line)
        i += 1
    return b"".join(lines)


def cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    """The least CPU time of `repeat` runs of `fn` (this process, one thread)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=256)
    args = parser.parse_args()
    rng = random.Random(25)
    data = make_ndjson(args.megabytes, rng)
    key = "runs/1/episodes/bench.ndjson.zst"
    segment = build_segment(data)
    blobs = _Blobs(key, segment.blob)
    rows = [{**row, "blob_key": key} for row in segment.rows]
    legacy_rows = [{**row, "frames_digest": None} for row in rows]
    shuffled = rows[:]
    rng.shuffle(shuffled)
    record_bytes = sum(row["length"] for row in rows)
    frames = len({row["frame_offset"] for row in rows})
    print(
        f"{len(rows)} records, {record_bytes / 1e6:.0f} MB of JSON (median "
        f"{sorted(r['length'] for r in rows)[len(rows) // 2] / 1e3:.0f} KB), {frames} frames, "
        f"{len(segment.blob) / 1e6:.0f} MB compressed; load average {os.getloadavg()[0]:.2f}"
    )

    def single_before() -> None:
        for row in shuffled:
            raw = blobs.get_range(key, row["frame_offset"], row["frame_length"])
            unchecked_decode(raw, row["offset"], row["length"])

    def single_now() -> None:
        for row in shuffled:
            checked_read(blobs, row)

    def single_whole_frames() -> None:
        for row in shuffled:
            raw = blobs.get_range(key, row["frame_offset"], row["frame_length"])
            b"".join(iter_frames(raw))[row["offset"] : row["offset"] + row["length"]]

    def single_record_digest() -> None:  # the alternative: a digest of the record's own bytes
        for row in shuffled:
            raw = blobs.get_range(key, row["frame_offset"], row["frame_length"])
            record = unchecked_decode(raw, row["offset"], row["length"])
            hashlib.blake2b(record, digest_size=16).digest()

    def many_before() -> None:
        for _ in iter_frames(segment.blob):
            pass

    def many_now() -> None:
        reader = RecordReader(WholeBlobs(blobs))  # type: ignore[arg-type]
        for row in rows:
            reader.record(Location.of(row))

    def many_legacy() -> None:
        reader = RecordReader(WholeBlobs(blobs))  # type: ignore[arg-type]
        for row in legacy_rows:
            reader.record(Location.of(row))

    per_gb = GB / record_bytes
    results = {
        "single before": cpu(single_before),
        "single now": cpu(single_now),
        "single whole frames": cpu(single_whole_frames),
        "single record digest": cpu(single_record_digest),
        "many before": cpu(many_before),
        "many now": cpu(many_now),
        "many rows before 0012": cpu(many_legacy),
    }
    for name, seconds in results.items():
        print(f"{name:24} {seconds * per_gb:6.2f} CPU s per GB of records")
    for path, alternatives in (
        ("single", ("now", "whole frames", "record digest")),
        ("many", ("now", "rows before 0012")),
    ):
        base = results[f"{path} before"]
        for alt in alternatives:
            added = results[f"{path} {alt}"] - base
            print(f"{path} {alt}: +{added * per_gb:.2f} CPU s per GB ({added / base:+.0%})")

    digest_cost = cpu(lambda: build_segment(data))
    from openruns.server import segments as segments_module

    plain = segments_module._with_digests
    segments_module._with_digests = lambda segment: segment
    try:
        without = cpu(lambda: build_segment(data))
    finally:
        segments_module._with_digests = plain

    def record_digests_at_ingest() -> None:  # the alternative's ingest of an SDK batch
        decompressor = zstandard.ZstdDecompressor()  # one frame per span here: one call each
        for offset, length in sorted({(r["frame_offset"], r["frame_length"]) for r in rows}):
            content = decompressor.decompress(segment.blob[offset : offset + length])
            for line in content.split(b"\n"):
                hashlib.blake2b(line, digest_size=16).digest()

    frames_only = cpu(lambda: segments_module._with_digests(segment))
    records_only = cpu(record_digests_at_ingest)
    print(
        f"an SDK batch's digests at ingest (no other decompression there): frames' "
        f"{frames_only * GB / len(data):.2f}, records' (decompress + hash) "
        f"{records_only * GB / len(data):.2f} CPU s per GB of NDJSON"
    )
    print(
        f"ingest (build_segment) {without * GB / len(data):.2f} CPU s per GB of NDJSON, "
        f"+{(digest_cost - without) * GB / len(data):.3f} for the digests "
        f"({(digest_cost - without) / without:+.1%}); load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
