"""
openruns.monitors: a trainer's metrics and episodes, fanned out to files, W&B and openruns.

    from openruns.monitors import Monitors, MonitorsConfig, FileMonitorConfig

    config = MonitorsConfig.from_env() or MonitorsConfig(file=FileMonitorConfig())
    monitors = Monitors.from_config(config, producer="orchestrator", output_dir="outputs")
    await monitors.log({"reward/mean": 0.4}, step=step)
    await monitors.log(episodes, step=step, kind="train", subset="effective")
    await monitors.finalize()

Each monitor runs on its own thread: the caller's event loop only queues references.
"""

from __future__ import annotations

from .base import Monitor
from .config import (
    FileMonitorConfig,
    MonitorsConfig,
    OpenrunsMonitorConfig,
    WandbMonitorConfig,
    merge_monitors,
    run_links,
)
from .fanout import Monitors
from .file.reader import FileMonitorReader
from .worker import MonitorStats

__all__ = [
    "FileMonitorConfig",
    "FileMonitorReader",
    "Monitor",
    "MonitorStats",
    "Monitors",
    "MonitorsConfig",
    "OpenrunsMonitorConfig",
    "WandbMonitorConfig",
    "merge_monitors",
    "run_links",
]
