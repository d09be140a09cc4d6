"""An episode with a field JSON cannot hold is stored, the field converted, named and counted."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import pydantic

import openruns

from .helpers import records, run_json


class Tensor:
    """Stands in for torch.Tensor: what matters is `.tolist()`."""

    __module__ = "torch"

    def __init__(self, values: list[float]):
        self.values = values

    def tolist(self) -> list[float]:
        return list(self.values)


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


@dataclasses.dataclass
class Usage:
    prompt: int
    completion: int


class Verdict(pydantic.BaseModel):
    score: float
    note: str


def test_odd_fields_are_converted_not_fatal(tmp_path, caplog):
    episode = {
        "id": "odd",
        "reward": np.float64("nan"),
        "traces": [
            {
                "logits": np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2],  # not contiguous
                "scores": np.array([0.5, 1.5]),
                "count": np.int64(7),
                "hidden": Tensor([0.25, 0.75]),
                "raw": b"\x00\x01\xfe",
                "thing": Opaque(),
                "usage": Usage(3, 4),
                "verdict": Verdict(score=1.0, note="ok"),
                "metrics": {"loss": math.inf},
            }
        ],
    }
    run = openruns.init(mode="offline", dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="openruns"):
        for _ in range(3):  # named once, counted every time
            run.log_episodes([episode])
        run.finish()
    assert run.failed_records == {} and run.dropped_records == 0
    stored = records(run.dir, "episodes")
    assert len(stored) == 3
    trace = stored[0]["traces"][0]
    assert stored[0]["reward"] is None and trace["metrics"] == {"loss": None}
    assert trace["logits"] == [[0.0, 2.0], [3.0, 5.0]] and trace["scores"] == [0.5, 1.5]
    assert trace["count"] == 7 and trace["hidden"] == [0.25, 0.75]
    assert trace["raw"] == "AAH+" and trace["thing"] == "<opaque thing>"
    assert trace["usage"] == {"prompt": 3, "completion": 4}
    assert trace["verdict"] == {"score": 1.0, "note": "ok"}

    converted = run_json(run.dir)["losses"]["converted_values"]
    assert converted == {
        "non-finite number as null": 6,
        "numpy.ndarray as list (tolist())": 3,
        "torch.Tensor as list (tolist())": 3,
        "bytes as base64": 3,
        f"{__name__}.Opaque as str()": 3,
        f"{__name__}.Verdict as mapping (model_dump())": 3,
    }
    messages = [r.getMessage() for r in caplog.records]
    nonfinite = [m for m in messages if "NaN or infinite" in m]
    assert len(nonfinite) == 1 and "reward" in nonfinite[0] and "metrics/loss" in nonfinite[0]
    assert sum("values JSON cannot hold" in m for m in messages) == 5  # each kind once
