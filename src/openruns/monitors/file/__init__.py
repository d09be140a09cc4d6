"""The file monitor: metrics.jsonl and a chunked, zstd-framed, indexed episode stream."""

from __future__ import annotations

from .monitor import FileMonitor, file_monitor_dir
from .reader import FileMonitorReader

__all__ = ["FileMonitor", "FileMonitorReader", "file_monitor_dir"]
