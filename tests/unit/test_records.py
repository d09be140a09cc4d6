from __future__ import annotations

import copy
import math

import pytest

from openruns.records import (
    clean_finite,
    flatten_metrics,
    index_fields,
    stamp_run,
    to_mapping,
)


class VerifiersLike:
    """Shaped like verifiers' Episode: to_record() returns a fresh JSON-ready dict."""

    def __init__(self, record):
        self._record = record
        self.calls = 0

    def to_record(self):
        self.calls += 1
        return copy.deepcopy(self._record)


class PydanticLike:
    def model_dump(self, mode, exclude_none):
        assert mode == "json" and exclude_none
        return {"id": "p1", "reward": 0.5}


def test_to_mapping_accepts_mappings_to_record_and_model_dump():
    assert to_mapping({"id": "m"}) == {"id": "m"}
    assert to_mapping(VerifiersLike({"id": "v"})) == {"id": "v"}
    assert to_mapping(PydanticLike()) == {"id": "p1", "reward": 0.5}
    with pytest.raises(TypeError, match="got int"):
        to_mapping(3)


def test_stamp_run_copies_and_keeps_the_producers_block():
    episode = {
        "id": "e1",
        "run": {
            "type": "train",
            "id": "local-id",
            "name": "n",
            "work": {"type": "train", "step": 4},
        },
        "traces": [{"id": "t1"}, {"id": "t2", "run": {"id": "other", "name": "judge"}}],
        "ok": True,
    }
    original = copy.deepcopy(episode)
    stamped = stamp_run(episode, "RUN", "eval")
    assert episode == original  # the producer's object is never mutated
    assert list(stamped) == list(episode)  # the run block keeps its position
    assert stamped["run"] == {
        "type": "eval",
        "id": "RUN",
        "name": "n",
        "work": original["run"]["work"],
    }
    assert stamped["traces"][0]["run"] == stamped["run"]
    assert stamped["traces"][1]["run"] == {"id": "RUN", "name": "judge", "type": "eval"}


def test_stamp_run_gives_a_record_without_id_one():
    stamped = stamp_run({"reward": 1.0}, "RUN", "train")
    assert len(stamped["id"]) == 32
    assert stamped["run"] == {"id": "RUN", "type": "train"}


def test_a_record_step_that_is_not_a_step_falls_back():
    """-1, 2**63, 1.5, True and "3" are not steps (the server refuses them with a 400): the
    record's index row takes the next candidate, so the batch it travels in is not refused."""
    for odd in (-1, 2**63, 1.5, True, "3"):
        assert index_fields({"run": {"work": {"step": odd}}, "step": 4}, 99)["step"] == 4
        assert index_fields({"run": {"work": {"step": 2}}, "step": odd}, 99)["step"] == 2
        assert index_fields({"step": odd}, 99)["step"] == 99
    assert index_fields({"step": 2**63 - 1}, 99)["step"] == 2**63 - 1


def test_index_fields_of_an_episode():
    episode = {
        "id": "e1",
        "env": {"id": "math", "name": "m"},
        "run": {"work": {"step": 12}},
        "ok": False,
        "traces": [
            {"agent": {"trainable": False}, "reward": 9.0, "num_total_tokens": 5},
            {
                "agent": {"trainable": True},
                "rewards": {"a": {"score": 1.0, "weight": 0.5}, "b": {"score": 0.5}},
                "num_total_tokens": 7,
                "timing": {"start": 100.0, "agent": {"start": 100.5, "end": 103.0}},
            },
        ],
    }
    row = index_fields(episode, fallback_step=99)
    assert row == {
        "id": "e1",
        "step": 12,
        "reward": 1.0,  # the trainable trace's: 1.0 * 0.5 + 0.5 * 1.0
        "env": "math",
        "ok": False,
        "tokens": 12,
        "duration": 3.0,
        "kind": None,
        "subset": None,
    }


def test_the_kind_and_subset_of_a_record():
    def kind(record):
        return index_fields(record, None)["kind"]

    work = {"run": {"type": "train", "work": {"type": "eval", "step": 3}}}
    assert kind(work) == "eval"  # in-training eval: run.type train, work.type eval
    assert kind({"run": {"type": "train"}, "traces": [{"info": {"kind": "eval"}}]}) == "eval"
    assert kind({"run": {"type": "train"}}) == "train"
    assert kind({**work, "kind": "train"}) == "train"  # the producer's own word wins
    assert index_fields({"subset": "effective"}, None)["subset"] == "effective"


def test_index_fields_of_a_trace_and_fallbacks():
    assert index_fields({"id": "t", "reward": float("nan")}, 5)["reward"] is None
    assert index_fields({"id": "t", "step": 2}, 5)["step"] == 2
    assert index_fields({"id": "t"}, 5)["step"] == 5
    assert index_fields({"id": "t", "reward": 0.25, "ok": True}, None)["ok"] is True


def test_flatten_metrics():
    np = pytest.importorskip("numpy")
    kept, dropped = flatten_metrics(
        {
            "loss": 0.5,
            "train": {"reward": np.float32(0.25), "n": np.int64(3), "nan": math.nan},
            "flag": True,
            "tensor_like": np.array(2.0),
            "inf": -math.inf,
            "text": "hello",
            "vector": np.array([1.0, 2.0]),
        }
    )
    assert kept == {"loss": 0.5, "train/reward": 0.25, "train/n": 3, "flag": 1, "tensor_like": 2.0}
    assert dropped == {
        "train/nan": "nan",
        "inf": "-inf",
        "text": "not a number (str)",
        "vector": "not a number (ndarray)",
    }


def test_clean_finite():
    assert clean_finite({"a": math.nan, "b": [1.0, math.inf, None], "c": {"d": 2}}) == {
        "b": [1.0, None],
        "c": {"d": 2},
    }
