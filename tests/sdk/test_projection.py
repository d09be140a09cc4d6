"""
openruns.projection against the real prime_runs.projection (0.1.4, a dev dependency): the same
eval rows and the same training-samples table for the same verifiers-shaped episodes.
"""

from __future__ import annotations

import io
import math

import prime_runs.projection as prime
import pyarrow.parquet as pq
import pytest

from openruns import projection
from tests.prime.verifiers_like import Reward, episode


def _episodes():
    out = [episode(i, step=10, kind="train", judge=i % 2 == 0, advantage=0.5 - i) for i in range(4)]
    out.append(episode(1, step=10, kind="train"))  # a second rollout of example 1
    odd = episode(5, step=10, kind="train")
    odd.traces[0].metrics["nan"] = math.nan
    odd.traces[0].rewards["partial"] = Reward(score=math.inf)
    odd.traces[0].rewards["missing"] = None
    out.append(odd)
    empty = episode(6, step=10, kind="train")
    empty.traces = []
    out.append(empty)
    return out


def test_eval_rows_are_the_same_as_prime_runs():
    episodes = _episodes()
    ours, theirs = {}, {}
    assert projection.build_samples(episodes, ours) == prime.build_samples(episodes, theirs)
    assert ours == theirs == {0: 1, 1: 2, 2: 1, 3: 1, 5: 1}
    row = projection.build_samples(episodes[:1])[0]
    assert row["sample_id"] == episodes[0].id
    assert row["info"]["native_wrapper"] == episodes[0].to_record()
    assert row["info"]["native_trace_index"] == 0
    odd = projection.build_samples(episodes[5:6])[0]
    assert odd["metrics"]["nan"] is None and odd["partial"] is None and "missing" not in odd


def test_a_trace_row_and_batches_are_the_same_as_prime_runs():
    trace = _episodes()[0].traces[1]
    assert projection.trace_to_sample(trace, 3, "ep") == prime.trace_to_sample(trace, 3, "ep")
    rows = [{"sample_id": str(i), "blob": "x" * 5_000_000} for i in range(12)]
    assert projection.batch_samples(rows) == prime.batch_samples(rows)
    assert len(projection.batch_samples(rows)) > 1
    with pytest.raises(ValueError, match="too large"):
        projection.batch_samples([{"blob": "x" * projection.MAX_SAMPLES_PAYLOAD_BYTES}])


def test_an_oversized_episode_becomes_one_row_per_trace(monkeypatch):
    big = episode(0, judge=True, answer_chars=2_000_000)
    monkeypatch.setattr(projection, "MAX_SAMPLES_PAYLOAD_BYTES", 3_000_000)
    monkeypatch.setattr(prime, "MAX_SAMPLES_PAYLOAD_BYTES", 3_000_000)
    ours = projection.episode_to_samples(big, 1)
    assert ours == prime.episode_to_samples(big, 1)
    assert [r["sample_id"] for r in ours] == [t.id for t in big.traces]


def test_the_training_table_is_the_same_as_prime_runs():
    episodes = _episodes()
    assert projection.train_sample_schema() == prime.train_sample_schema()
    ours = projection.episodes_to_parquet_bytes(episodes, "run-1", 10, sample_id_offset=1 << 32)
    theirs = prime.episodes_to_parquet_bytes(episodes, "run-1", 10, sample_id_offset=1 << 32)
    a, b = pq.read_table(io.BytesIO(ours)), pq.read_table(io.BytesIO(theirs))
    assert a.schema == b.schema == projection.train_sample_schema()
    assert a.drop_columns(["created_at"]).to_pylist() == b.drop_columns(["created_at"]).to_pylist()
    assert a.num_rows == 6 and a.column("sample_id")[0].as_py() == 1 << 32
    assert pq.ParquetFile(io.BytesIO(ours)).metadata.row_group(0).column(0).compression == "SNAPPY"
    assert projection.episodes_to_parquet_bytes(episodes[-1:], "run-1", 10) is None
    assert projection.parquet_available()
