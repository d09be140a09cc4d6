"""metric_rows.whole_chunks: the batches of an upload streamed through the server regrouped so
that columns end where a chunk of the store ends (each chunk written once), the rows the same
and in the same order, the counts adding up, each batch bounded."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from openruns.server.metric_rows import HELD_BATCHES, whole_chunks
from openruns.server.store.metric_chunks import CHUNK_SHIFT, CHUNK_STEPS
from openruns.server.store.metrics import MetricColumns, MetricPoints


def columns(names, steps, timed=True):
    steps = np.asarray(steps, np.int64)
    values = np.arange(len(steps) * len(names), dtype=np.float64).reshape(len(steps), -1)
    times = 1.7e9 + steps.astype(np.float64) if timed else None
    return MetricColumns(tuple(names), steps, times, values + steps[:, None] / 7)


def writes(batches) -> list[tuple]:
    """Every point in the order the store writes them: (name, step, value, time)."""
    out = []
    for _, batch in batches:
        if isinstance(batch, MetricColumns):
            times = batch.times if batch.times is not None else [np.nan] * len(batch.steps)
            for step, ts, row in zip(batch.steps, times, batch.values, strict=True):
                at = None if np.isnan(ts) else float(ts)  # (NaN: none; NaN != NaN)
                out += [(n, int(step), float(v), at) for n, v in zip(batch.names, row, strict=True)]
        else:
            out += [(n, s, v, ts) for (n, s), (v, ts) in batch.items()]
    return out


def test_a_dense_upload_cut_every_2500_rows_is_written_a_chunk_at_a_time():
    names = [f"m{i}" for i in range(20)]
    cut = [(2500, columns(names, range(a, a + 2500))) for a in range(0, 10_000, 2500)]
    out = list(whole_chunks(cut, 50_000))
    assert sum(rows for rows, _ in out) == 10_000
    assert writes(out) == writes(cut)
    ends = [int(batch.steps[-1]) for _, batch in out]
    # Every batch but the last ends at a chunk's end; the last holds the upload's last rows.
    assert [(end + 1) % CHUNK_STEPS for end in ends[:-1]] == [0] * (len(ends) - 1)
    assert ends[-1] == 9_999
    assert max(len(batch.steps) for _, batch in out) <= CHUNK_STEPS + 2500


def test_other_names_or_loose_points_between_flush_what_was_held():
    a, b = columns(["x"], range(100)), columns(["y"], range(100), timed=False)
    loose = MetricPoints()
    loose[("x", 5)] = (1.0, None)
    batches = [(100, a), (1, loose), (100, b), (100, columns(["y"], range(100, 200)))]
    out = list(whole_chunks(batches, 1_000))
    assert writes(out) == writes(batches)  # x's rows before the loose point that overrides one
    assert sum(rows for rows, _ in out) == 301
    # y's two batches (one without times) went together: its times are NaN where it had none.
    (joined,) = [
        batch for _, batch in out if isinstance(batch, MetricColumns) and batch.names == ("y",)
    ]
    assert len(joined.steps) == 200 and np.isnan(joined.times[:100]).all()


def test_a_last_chunk_past_the_bound_is_not_held():
    # 3000 rows of 4 names: 12,000 points, more than HELD_BATCHES x 1000.
    batch = columns(["a", "b", "c", "d"], range(3000))
    assert [len(b.steps) for _, b in whole_chunks([(3000, batch)], 1000)] == [3000]
    assert HELD_BATCHES * 1000 < 12_000


@st.composite
def uploads(draw):
    names_pool = [("a",), ("a", "b"), ("b",)]
    out, step = [], draw(st.integers(0, 3 * CHUNK_STEPS))
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()) and draw(st.booleans()):
            loose = MetricPoints()
            loose[("a", draw(st.integers(0, 5 * CHUNK_STEPS)))] = (draw(st.floats(-1, 1)), None)
            out.append((1, loose))
            continue
        n = draw(st.integers(1, 3000))
        back = draw(st.sampled_from([0, 0, 0, 50, 5000]))  # replayed or earlier steps at times
        step = max(0, step - back)
        steps = list(range(step, step + n))
        step += n
        out.append((n, columns(draw(st.sampled_from(names_pool)), steps, draw(st.booleans()))))
    return out


@settings(max_examples=150, deadline=None)
@given(batches=uploads(), bound=st.sampled_from([1, 500, 2000, 6000, 50_000]))
def test_regrouped_batches_write_the_same_points_in_the_same_order(batches, bound):
    out = list(whole_chunks(batches, bound))
    assert writes(out) == writes(batches)
    assert sum(rows for rows, _ in out) == sum(rows for rows, _ in batches)
    biggest = max(
        (len(b.steps) * len(b.names) for _, b in batches if isinstance(b, MetricColumns)), default=0
    )
    for (_, batch), (_, after) in zip(out, [*out[1:], (0, None)], strict=True):
        if not isinstance(batch, MetricColumns):
            continue
        assert len(batch.steps) * len(batch.names) <= HELD_BATCHES * bound + biggest
        if isinstance(after, MetricColumns) and after.names == batch.names:
            # Held back it was not: its last chunk's rows were more than the bound.
            last = batch.steps >> CHUNK_SHIFT
            run = len(last) - (
                np.flatnonzero(last != last[-1])[-1] + 1 if (last != last[-1]).any() else 0
            )
            held = HELD_BATCHES * bound
            assert int(after.steps[0]) >> CHUNK_SHIFT != last[-1] or run * len(batch.names) > held
