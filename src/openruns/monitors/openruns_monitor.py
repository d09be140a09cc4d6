"""
The openruns monitor: a producer's metrics and its chosen episode cohorts into an openruns run.

Under `openruns run` or `openruns launch` the launcher owns the run and exported its id; on a
hosted platform the pod is given only `RUN_ID` (seed 000). Either way the monitor attaches, as
prime-rl's does (`init(id=$RUN_ID)`: an id from the environment is an attach, ownership.py), and
finalize() only flushes this process's records: a component can never finish the run while
another still logs to it; whoever created the run sets its status. Started on its own, the
monitor creates the run and finalize() completes it (a crash leaves that to the SDK's exit
hooks: crashed).

Each episode is stored with the kind and subset it was logged as; metric rows without a step
stay time-keyed; annotations go to the run (their producer: this monitor's). The link record
`monitors/openruns/run.json` holds the run's id and URL.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..identity import COMPAT_RUN_ID_ENV
from ..run import Run
from .base import Monitor, write_link
from .config import OpenrunsMonitorConfig

__all__ = ["OpenrunsMonitor"]

logger = logging.getLogger("openruns.monitors")


class OpenrunsMonitor(Monitor):
    name = "openruns"

    def __init__(self, config: OpenrunsMonitorConfig, *, producer: str, output_dir: Path):
        self.config = config
        self.producer = producer
        self.output_dir = output_dir
        self.run: Run | None = None

    def setup(self) -> None:
        import openruns

        self.run = openruns.init(
            id=os.environ.get(COMPAT_RUN_ID_ENV) or None,
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
        record = {"id": self.run.id, "url": self.run.url, "kind": self.run.kind}
        write_link(self.output_dir, "openruns", record)

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        assert self.run is not None
        self.run.log_metrics(values, step=step)  # step None: a row keyed by its time

    def wants_episodes(self, kind: str, subset: str) -> bool:
        return f"{kind}/{subset}" in self.config.cohorts

    def log_episodes(self, episodes: list[Any], step: int | None, kind: str, subset: str) -> None:
        assert self.run is not None
        self.run.log_episodes(episodes, step=step, kind=kind, subset=subset)

    def wants_annotations(self) -> bool:
        return True

    def log_annotations(self, annotations: list[dict[str, Any]]) -> None:
        assert self.run is not None
        self.run.log_annotations(
            [a if "producer" in a else {**a, "producer": self.producer} for a in annotations]
        )

    def finalize(self) -> None:
        if self.run is not None:
            self.run.finish()  # attached: flush only; created here: completed
