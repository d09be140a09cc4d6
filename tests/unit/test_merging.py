"""Merging a lane's waiting batches into one upload: caps, the derived key, the merged batch."""

from __future__ import annotations

import orjson
import pytest

from openruns.batches import Batch, batch_lines, parse_header
from openruns.rundir import Spool, iter_stream, read_index, read_record
from openruns.upload.batching import BatchAssembler, FrameCutter
from openruns.upload.merging import (
    MERGE_KEY_PREFIX,
    MergeCaps,
    merge_batches,
    merge_key,
    mergeable_prefix,
)


def batch(stream: str, *values: int, frame_bytes: int = 1 << 20) -> Batch:
    cutter = FrameCutter(stream, 1 << 30, frame_bytes=frame_bytes)
    assembler = BatchAssembler(stream)
    for value in values:
        line = [orjson.dumps({"id": f"r{value}", "v": value, "pad": "x" * 40}), b"\n"]
        row = None if stream == "metrics" else {"id": f"r{value}"}
        for work in cutter.add(line, row):
            assert assembler.add(work) is None
    out = assembler.add(cutter.cut())
    assert out is not None
    return out


def lines(b: Batch) -> list[int]:
    data = b"".join(b.parts)
    _, length = parse_header(data)
    return [orjson.loads(line)["v"] for line in batch_lines(data, length).splitlines()]


def test_the_prefix_stops_at_each_cap_and_always_takes_one():
    caps = MergeCaps(bytes=100, records=10, batches=3)
    assert mergeable_prefix([], caps) == 0
    assert mergeable_prefix([(500, 500)], caps) == 1  # too big alone: goes alone
    assert mergeable_prefix([(40, 1)] * 5, caps) == 2  # 3 x 40 bytes > 100
    assert mergeable_prefix([(10, 4)] * 5, caps) == 2  # 3 x 4 records > 10
    assert mergeable_prefix([(1, 1)] * 5, caps) == 3  # the batch count
    assert mergeable_prefix([(10, 1), (95, 1), (1, 1)], caps) == 1  # in order, no skipping


def test_caps_below_one_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="MergeCaps.records"):
        MergeCaps(bytes=1, records=0, batches=1)


def test_the_key_is_the_same_for_the_same_parts_in_the_same_order_only():
    assert merge_key(["a", "b", "c"]) == merge_key(["a", "b", "c"])
    assert merge_key(["a", "b", "c"]).startswith(MERGE_KEY_PREFIX)
    others = [["a", "c", "b"], ["a", "b"], ["ab", "c"], ["a", "bc"], ["a", "b", "c", "d"]]
    assert len({merge_key(k) for k in others} | {merge_key(["a", "b", "c"])}) == 6
    with pytest.raises(ValueError, match="at least 2"):
        merge_key(["a"])


def test_a_merged_metrics_batch_is_its_parts_lines_in_order_under_the_derived_key():
    parts = [batch("metrics", 0, 1), batch("metrics", 2), batch("metrics", 3, 4, 5)]
    merged = merge_batches(parts)
    header, _ = parse_header(merged.parts[0])
    assert merged.key == header["key"] == merge_key([p.key for p in parts])
    assert (merged.records, header["records"]) == (6, 6)
    assert lines(merged) == [0, 1, 2, 3, 4, 5]
    assert "rows" not in header
    assert merged.nbytes < sum(p.nbytes for p in parts)  # one header instead of three
    assert merge_batches(parts).key == merged.key  # the same merge again: the same request
    assert b"".join(merge_batches(parts).parts) == b"".join(merged.parts)


def test_a_merged_episodes_batch_locates_every_record_through_its_shifted_rows(tmp_path):
    # Small frames, so the parts have several frames each and the shift matters.
    parts = [batch("episodes", *range(i * 10, i * 10 + 10), frame_bytes=200) for i in range(3)]
    merged = merge_batches(parts)
    assert len(parse_header(merged.parts[0])[0]["frames"]) > len(parts)
    spool = Spool(tmp_path, "w1", 10**9)
    assert spool.put(merged) is not None
    spool.sync(("episodes",))
    rows = read_index(tmp_path, "episodes")
    assert [row["id"] for row in rows] == [f"r{v}" for v in range(30)]
    assert [read_record(tmp_path, "episodes", row)["v"] for row in rows] == list(range(30))
    assert [r["v"] for r in iter_stream(tmp_path, "episodes")] == list(range(30))


def test_batches_of_different_streams_or_a_single_batch_do_not_merge():
    with pytest.raises(ValueError, match="streams"):
        merge_batches([batch("metrics", 0), batch("logs", 1)])
    with pytest.raises(ValueError, match="at least 2"):
        merge_batches([batch("metrics", 0)])
