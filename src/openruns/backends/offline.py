"""
Offline runs: a real run written to `<dir>/<run id>/` in the run-directory format (rundir.py),
uploadable later with `openruns sync`. The owner writes run.json; every writing process writes
its own segments and `writers/<writer>.json`.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from ..rundir import new_writer_id, read_json, write_json_atomic
from ..sinks.local import LocalSink
from ..spec import RunStatus
from ..upload.stats import Stats

__all__ = ["FORMAT_VERSION", "OfflineBackend"]

FORMAT_VERSION = 2  # 2: segments of batches (header frame + data frames), issue 13


class OfflineBackend:
    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.url = run_dir.resolve().as_uri()

    @classmethod
    def create(cls, run_dir: Path, metadata: dict[str, Any]) -> OfflineBackend:
        run_dir.mkdir(parents=True, exist_ok=False)
        doc = {
            "format": FORMAT_VERSION,
            **metadata,
            "status": RunStatus.RUNNING.value,
            "error": None,
            "summary": {},
            "created_at": time.time(),
            "finished_at": None,
            "owner": {"pid": os.getpid(), "host": socket.gethostname()},
            "losses": {"dropped_records": 0, "failed_records": {}},
        }
        write_json_atomic(run_dir / "run.json", doc)
        return cls(run_dir)

    @classmethod
    def attach(cls, run_dir: Path) -> OfflineBackend:
        run_dir.mkdir(parents=True, exist_ok=True)
        return cls(run_dir)

    def make_sink(self, stats: Stats) -> LocalSink:
        return LocalSink(self.run_dir, new_writer_id(), stats)

    def update(self, summary: dict[str, Any]) -> None:
        self._rewrite(summary=summary)

    def finalize(
        self,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        losses: dict[str, Any],
        deadline: float | None = None,
    ) -> None:
        self._rewrite(
            status=status.value,
            error=error,
            summary=summary,
            losses=losses,
            finished_at=time.time(),
        )

    def close(self) -> None:
        pass

    def close_writer(self, writer_id: str | None, stats: Stats, dropped: int) -> None:
        if writer_id is None:
            return
        write_json_atomic(
            self.run_dir / "writers" / f"{writer_id}.json",
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "written": stats.written,
                "failed_records": stats.failed,
                "dropped_records": dropped,
                "spooled_records": stats.spooled,
                "dropped_metric_values": stats.dropped_values,
                "converted_values": stats.converted,
                "errors": stats.errors,
                "closed_at": time.time(),
            },
        )

    def _rewrite(self, **changes: Any) -> None:
        path = self.run_dir / "run.json"
        doc = read_json(path) or {"format": FORMAT_VERSION}
        doc.update(changes)
        write_json_atomic(path, doc)
