"""
The openruns monitor: a producer's metrics and its chosen episode cohorts into an openruns run.

Under `openruns run` or `openruns launch` the launcher owns the run and exported its id, so
`openruns.init()` here attaches, and finalize() only flushes this process's records: a
component can never finish the run while another still logs to it. Started on its own, the
monitor creates the run and finalize() completes it (a crash leaves that to the SDK's exit
hooks: crashed).
"""

from __future__ import annotations

import logging
from typing import Any

from ..run import Run
from .base import Monitor
from .config import OpenrunsMonitorConfig

__all__ = ["OpenrunsMonitor"]

logger = logging.getLogger("openruns.monitors")


class OpenrunsMonitor(Monitor):
    name = "openruns"

    def __init__(self, config: OpenrunsMonitorConfig, *, producer: str):
        self.config = config
        self.producer = producer
        self.run: Run | None = None
        self._last_step = 0

    def setup(self) -> None:
        import openruns

        self.run = openruns.init(
            kind=self.config.kind,
            name=self.config.name,
            model=self.config.model,
            mode=self.config.mode,
            dir=self.config.dir,
        )
        logger.info(
            "openruns monitors: %s logs to run %s (%s)",
            self.producer,
            self.run.id,
            "attached" if self.run.attached else "created",
        )

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        assert self.run is not None
        # A run's metrics are keyed by step: a time-keyed row (step None) joins the last step
        # this producer logged, rather than inventing the next one.
        if step is None:
            step = self._last_step
        else:
            self._last_step = step
        self.run.log_metrics(values, step=step)

    def wants_episodes(self, kind: str, subset: str) -> bool:
        return f"{kind}/{subset}" in self.config.cohorts

    def log_episodes(self, episodes: list[Any], step: int | None, kind: str, subset: str) -> None:
        assert self.run is not None
        self.run.log_episodes(episodes, step=step)

    def finalize(self) -> None:
        if self.run is not None:
            self.run.finish()  # attached: flush only; created here: completed
