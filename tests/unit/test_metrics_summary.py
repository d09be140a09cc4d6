from __future__ import annotations

import math

import openruns


def test_from_episodes_averages_trainable_traces():
    episodes = [
        {
            "ok": True,
            "traces": [
                {"agent": {"trainable": True}, "reward": 1.0, "metrics": {"len": 10}},
                {"agent": {"trainable": False}, "reward": 100.0},
            ],
        },
        {
            "ok": False,
            "traces": [
                {
                    "agent": {"trainable": True},
                    "rewards": {"correct": {"score": 0.0, "weight": 1.0}},
                    "metrics": {"len": 20, "bad": math.nan},
                }
            ],
        },
    ]
    summary = openruns.metrics.from_episodes(episodes)
    assert summary == {
        "avg_reward": 0.5,
        "avg_metrics": {"len": 15.0, "correct": 0.0},
        "avg_error": 0.5,
    }


def test_from_episodes_of_nothing():
    assert openruns.metrics.from_episodes([]) == {
        "avg_reward": 0.0,
        "avg_metrics": {},
        "avg_error": 0.0,
    }
