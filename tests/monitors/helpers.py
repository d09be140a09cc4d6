"""Small episodes for the monitor tests."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from openruns.monitors import Monitor


def episode(i: int, size: int = 2_000, step: int = 0) -> dict[str, Any]:
    """An episode of about `size` bytes whose text does not compress away."""
    text = random.Random(i).randbytes(size // 2).hex()
    return {
        "id": f"ep-{i}",
        "env": {"id": "math-basic", "name": "math"},
        "run": {"type": "train", "work": {"type": "train", "step": step}},
        "ok": i % 2 == 0,
        "traces": [
            {
                "agent": {"name": "agent", "trainable": True},
                "nodes": [{"message": {"role": "assistant", "content": text}}],
                "rewards": {"correct": {"score": i / 10, "weight": 1.0}},
                "num_total_tokens": 10 + i,
            }
        ],
    }


@dataclass(frozen=True)
class EchoConfig:
    """A monitor added by one registration (test_config.py)."""

    prefix: str = "echo"


class EchoMonitor(Monitor):
    name = "echo"
    seen: ClassVar[list[Any]] = []

    def __init__(self, config: EchoConfig, *, producer: str, output_dir: Path):
        self.config = config
        self.producer = producer

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        self.seen.append((self.config.prefix, self.producer, step, values))
