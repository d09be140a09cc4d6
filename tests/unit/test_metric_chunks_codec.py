"""The packed columns of a metric chunk (server/store/metric_chunks.py): encode then decode
gives the points back, bit for bit, whatever their steps, values and times."""

from __future__ import annotations

import math
import struct
from array import array

from hypothesis import given
from hypothesis import strategies as st

from openruns.server.store.metric_chunks import CHUNK_STEPS, Columns, decode, encode


def round_trip(steps: list[int], values: list[float], times: list[float | None]) -> Columns:
    stamps = None
    if any(t is not None for t in times):
        stamps = array("d", [math.nan if t is None else t for t in times])
    packed = encode(Columns(steps, array("d", values), stamps))
    return decode(steps[0], steps[-1], *packed)


def bits(values) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


@given(
    chunk=st.integers(0, 2**40),
    offsets=st.sets(st.integers(0, CHUNK_STEPS - 1), min_size=1),
    data=st.data(),
)
def test_any_points_round_trip(chunk, offsets, data):
    steps = [chunk * CHUNK_STEPS + o for o in sorted(offsets)]
    values = data.draw(
        st.lists(st.floats(allow_nan=False), min_size=len(steps), max_size=len(steps))
    )
    times = data.draw(
        st.lists(st.none() | st.floats(allow_nan=False, allow_infinity=False),
                 min_size=len(steps), max_size=len(steps))
    )  # fmt: skip
    cols = round_trip(steps, values, times)
    assert list(cols.steps) == steps
    assert bits(cols.values) == bits(values)  # -0.0, subnormals, infinities as they were
    if all(t is None for t in times):
        assert cols.times is None
    else:
        assert cols.times is not None
        assert [None if t != t else t for t in cols.times] == times


def test_contiguous_steps_take_no_bytes_and_columns_compress_where_it_pays():
    steps = list(range(5 * CHUNK_STEPS, 6 * CHUNK_STEPS))
    values = [float(i % 10) for i in range(CHUNK_STEPS)]  # repetitive: compressed
    packed_steps, vals, times = encode(Columns(steps, array("d", values), None))
    assert packed_steps == b"" and times is None
    assert vals[0] == 1 and len(vals) < CHUNK_STEPS  # zstd, tagged
    noise = [math.sin(i) * 1e3 / 7 for i in range(CHUNK_STEPS)]  # incompressible: raw
    _, vals, _ = encode(Columns(steps, array("d", noise), None))
    assert vals[0] == 0 and len(vals) == 1 + 8 * CHUNK_STEPS
    sparse = steps[::3]
    packed_steps, _, _ = encode(Columns(sparse, array("d", noise[::3]), None))
    assert packed_steps and len(packed_steps) < len(sparse)  # deltas of 3: compressed
    back = decode(sparse[0], sparse[-1], *encode(Columns(sparse, array("d", noise[::3]), None)))
    assert list(back.steps) == sparse


def test_keys_sharing_their_times_pack_them_once_and_each_reads_its_own():
    """A write's chunks share one memo of packed times (the keys of a row share its time):
    the same times column is packed once, and every chunk decodes to its own points."""
    steps = list(range(2 * CHUNK_STEPS, 2 * CHUNK_STEPS + 600))
    stamps = array("d", [1.7e9 + s / 10 for s in steps])
    other = array("d", [1.8e9 + s for s in steps])
    memo: dict[bytes, bytes] = {}
    columns = [
        (key, encode(Columns(steps, array("d", [key + s for s in steps]), times), memo))
        for key, times in ((0, stamps), (1, stamps), (2, other), (3, stamps))
    ]
    assert len(memo) == 2  # two distinct times columns among four chunks
    assert columns[0][1][2] is columns[1][1][2] is columns[3][1][2]
    for key, packed in columns:
        alone = encode(
            Columns(steps, array("d", [key + s for s in steps]), other if key == 2 else stamps)
        )
        assert packed == alone  # the same bytes as packed without the memo
        back = decode(steps[0], steps[-1], *packed)
        assert list(back.values) == [key + s for s in steps]
        assert list(back.times) == list(other if key == 2 else stamps)
