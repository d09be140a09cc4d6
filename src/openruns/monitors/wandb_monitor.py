"""
The W&B monitor: metrics to one W&B run shared by every process of a launch.

The run id is `$WANDB_RUN_ID`, else the openruns run id (`$OPENRUNS_RUN_ID`, exported by the
run's owner), else W&B's own; it is then exported as `WANDB_RUN_ID`, so processes this one
starts join the same run. Online, with `primary` set, the processes use W&B's shared mode: the
primary creates the run and sets its final state, the others join it with their producer as
label. Episodes are not sent (W&B gets scalars). The link record `monitors/wandb/run.json`
holds the W&B run's id and URL.

`wandb` is imported when the monitor is built, on the caller's thread: the import executes
seconds of module code that, on a worker thread, would stall the producer's event loop by up to
~45 ms at a time; `wandb.init` (another second, mostly waiting on W&B's service process) runs on
the monitor's thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..identity import RUN_ID_ENV
from .base import Monitor, write_link
from .config import WandbMonitorConfig

__all__ = ["WandbMonitor"]


class WandbMonitor(Monitor):
    name = "wandb"

    def __init__(self, config: WandbMonitorConfig, *, producer: str, output_dir: Path):
        self.config = config
        self.producer = producer
        self.output_dir = output_dir
        self.dir = Path(config.dir) if config.dir else output_dir / "monitors" / "wandb" / producer
        self.run: Any = None
        self._timed: set[str] = set()  # metric globs charted against time (rows without a step)
        try:
            import wandb  # noqa: F401  (imported here for its cost; setup() finds it loaded)
        except ImportError:
            self._installed = False  # setup() says how to install it, and the monitor is disabled
        else:
            self._installed = True

    def wants_episodes(self, kind: str, subset: str) -> bool:
        return False

    def setup(self) -> None:
        if not self._installed:
            raise RuntimeError(
                "the wandb monitor needs the wandb package: pip install 'openruns[wandb]'"
            )
        import wandb  # already loaded by __init__

        mode = self.config.mode or os.environ.get("WANDB_MODE") or "online"
        run_id = os.environ.get("WANDB_RUN_ID") or os.environ.get(RUN_ID_ENV) or None
        settings = None
        if mode == "online" and self.config.primary is not None:
            primary = self.producer == self.config.primary
            settings = wandb.Settings(
                mode="shared",
                x_label=self.producer,
                x_primary=primary,
                x_update_finish_state=primary,
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=self.config.project,
            entity=self.config.entity,
            name=self.config.name,
            group=self.config.group,
            tags=list(self.config.tags) or None,
            id=run_id,
            resume="allow" if run_id else None,
            dir=str(self.dir),
            # Text from the config or $WANDB_MODE: wandb's Settings validate it and take more
            # modes (dryrun, run) than init's Literal annotation lists.
            mode=None if settings is not None else mode,  # type: ignore[arg-type]
            settings=settings,
            reinit="create_new",
        )
        os.environ.setdefault("WANDB_RUN_ID", self.run.id)
        # Producers log their own steps (and may repeat one): chart against the "step" column,
        # not W&B's per-process call counter.
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        url = getattr(self.run, "url", None)
        write_link(self.output_dir, "wandb", {"id": self.run.id, "url": url})

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        if step is None:
            # A row keyed by time (inference/*, event_loop_lag/*): charted against W&B's own
            # timestamp, as prime-rl does, the first time its top-level prefix shows up.
            for key in values:
                glob = key.split("/", 1)[0] + "/*" if "/" in key else key
                if glob not in self._timed:
                    self._timed.add(glob)
                    self.run.define_metric(glob, step_metric="_timestamp")
            self.run.log(values)
        else:
            self.run.log({**values, "step": step})

    def finalize(self) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0)
