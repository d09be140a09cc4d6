"""
Offline runs: a real run written to `<dir>/<run id>/` in the run-directory format (rundir.py),
uploadable later with `openruns sync`. The owner writes run.json; every writing process writes
its own segments and `writers/<writer>.json`. A process attached to the run that has metadata
or a fatal error for it writes `reports/<writer>.json`; the owner reads them (reported_error)
and merges their metadata into run.json where it has none when it finalizes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..rundir import new_writer_id, read_json, write_json_atomic
from ..sinks.local import LocalSink
from ..spec import FILLABLE, RunStatus
from ..upload.stats import Stats

__all__ = ["FORMAT_VERSION", "OfflineBackend", "add_writers_losses", "open_writer"]

logger = logging.getLogger("openruns")

FORMAT_VERSION = 2  # 2: segments of batches (header frame + data frames), issue 13


class OfflineBackend:
    def __init__(self, run_dir: Path, *, owner: bool):
        self.run_dir = run_dir
        self.owner = owner
        self.url = run_dir.resolve().as_uri()

    @classmethod
    def create(cls, run_dir: Path, metadata: dict[str, Any]) -> OfflineBackend:
        """Create the run; with `metadata["resume"]`, reopen it when it exists."""
        metadata = dict(metadata)
        resume = bool(metadata.pop("resume", False))
        owner = {"pid": os.getpid(), "host": socket.gethostname()}
        existing = read_json(run_dir / "run.json") if resume else None
        if existing is not None:
            # A resume: the run is running again, owned by this process; its metadata stays.
            existing.update(
                status=RunStatus.RUNNING.value, error=None, finished_at=None, owner=owner
            )
            write_json_atomic(run_dir / "run.json", existing)
            return cls(run_dir, owner=True)
        run_dir.mkdir(parents=True, exist_ok=resume)
        doc = {
            "format": FORMAT_VERSION,
            **metadata,
            "status": RunStatus.RUNNING.value,
            "error": None,
            "summary": {},
            "created_at": time.time(),
            "finished_at": None,
            "owner": owner,
            "losses": {"dropped_records": 0, "failed_records": {}},
        }
        write_json_atomic(run_dir / "run.json", doc)
        return cls(run_dir, owner=True)

    @classmethod
    def attach(cls, run_dir: Path) -> OfflineBackend:
        run_dir.mkdir(parents=True, exist_ok=True)
        return cls(run_dir, owner=False)

    def fill(self, fields: dict[str, Any]) -> None:
        """The owner sets `fields` in run.json where it has none; another process reports them."""
        if self.owner:
            path = self.run_dir / "run.json"
            doc = read_json(path) or {"format": FORMAT_VERSION}
            for report in self.reports():  # what attached processes reported came first
                fill_missing(doc, report)
            write_json_atomic(path, fill_missing(doc, fields))
            return
        report = {k: v for k, v in fields.items() if k in FILLABLE or k == "error"}
        report["reported_at"] = time.time()
        write_json_atomic(self.run_dir / "reports" / f"{new_writer_id()}.json", report)

    def reports(self) -> list[dict[str, Any]]:
        """The reports of attached processes, oldest first."""
        found = []
        for path in sorted((self.run_dir / "reports").glob("*.json")):
            doc = read_json(path)
            if isinstance(doc, dict):
                found.append(doc)
        return sorted(found, key=lambda d: d.get("reported_at") or 0.0)

    def reported_error(self) -> str | None:
        for report in self.reports():
            error = report.get("error")
            if isinstance(error, str) and error:
                return error
        return None

    def make_sink(self, stats: Stats) -> LocalSink:
        sink = LocalSink(self.run_dir, new_writer_id(), stats)
        open_writer(self.run_dir, sink.writer_id)
        return sink

    def update(self, summary: dict[str, Any]) -> None:
        self._rewrite(summary=summary)

    def define_metrics(self, axes: dict[str, str | None]) -> None:
        """Kept in run.json (`step_metrics`) for `openruns sync`."""
        doc = read_json(self.run_dir / "run.json") or {}
        self._rewrite(step_metrics={**(doc.get("step_metrics") or {}), **axes})

    def finalize(
        self,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        losses: dict[str, Any],
        deadline: float | None = None,
    ) -> None:
        if self.owner:
            self.fill({})
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


def open_writer(run_dir: Path, writer_id: str) -> None:
    """
    Say in the run directory that this process writes to the run: `writers/<writer>.json`
    without `closed_at`, until close_writer() replaces it with what the process delivered and
    lost. A writer the run's owner finds still unclosed, its process gone, ended without
    counting what it had not delivered (SIGKILL, os._exit, a crash): add_writers_losses counts
    it (issue 24). A directory that cannot be written only loses that account.
    """
    try:
        write_json_atomic(
            run_dir / "writers" / f"{writer_id}.json",
            {"pid": os.getpid(), "host": socket.gethostname(), "opened_at": time.time()},
        )
    except OSError as exc:
        logger.warning("openruns: cannot write to the run directory %s: %s", run_dir, exc)


def add_writers_losses(
    losses: dict[str, Any], run_dir: Path, since: float, own_writer: str | None
) -> dict[str, Any]:
    """
    `losses` (the owner's) plus what the run directory's other writers that closed since
    `since` recorded: the dropped, failed (by destination) and spooled records of the processes
    attached to the run (a child of `openruns run` flushing on SIGTERM, issue 20), so the run
    counts what they could not deliver. A writer of this host that opened since `since` and
    ended without closing (killed before it could count) is counted in `unclosed_writers`: what
    it had not delivered is lost, and how much is not known. Writers on other nodes, with
    other directories, report nothing here; their spools are counted when `openruns sync`
    uploads them.
    """
    total = {**losses, "failed_records": dict(losses.get("failed_records") or {})}
    host = socket.gethostname()
    for path in sorted((run_dir / "writers").glob("*.json")):
        doc = read_json(path)
        if path.stem == own_writer or not isinstance(doc, dict):
            continue
        if not isinstance(doc.get("closed_at"), (int, float)):
            if _ended_unclosed(doc, since, host):
                total["unclosed_writers"] = total.get("unclosed_writers", 0) + 1
            continue
        if doc["closed_at"] < since:
            continue  # an earlier session's: counted when that session closed the run
        for name in ("dropped_records", "spooled_records"):
            if isinstance(doc.get(name), int) and doc[name]:
                total[name] = total.get(name, 0) + doc[name]
        for where, count in (doc.get("failed_records") or {}).items():
            if isinstance(count, int) and count:
                total["failed_records"][where] = total["failed_records"].get(where, 0) + count
    return total


def _ended_unclosed(doc: dict[str, Any], since: float, host: str) -> bool:
    """An open writer's record whose process, on this host and opened since `since`, is gone."""
    opened, pid = doc.get("opened_at"), doc.get("pid")
    if not isinstance(opened, (int, float)) or opened < since or doc.get("host") != host:
        return False
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process by that number: running
        return False
    return False


def fill_missing(doc: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """`doc` with each of `fields` set where doc has none (missing, null or empty)."""
    for key, value in fields.items():
        if key in FILLABLE and doc.get(key) in (None, [], {}, "") and value not in (None, []):
            doc[key] = value
    return doc
