"""
`openruns sync [PATHS...]`: upload offline runs and leftover spools of online runs.

For each run directory: create the run on the server if it is not there (the id is the one the
run was given at init, so this is idempotent), upload every batch the server has not
acknowledged (each with the Idempotency-Key in its header, so an interrupted sync, or a batch
the live process had already sent, is never stored twice), then set the final status from
run.json. A run whose owner died without closing it (SIGKILL, a lost node) is closed as
crashed. Acknowledged batches are recorded in `<stream>/acked.ndjson`, so a second sync uploads
nothing; an online run's spool segments are deleted once every batch in them is acknowledged
(an offline run's segments are the run itself and stay).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .errors import APIError, ConflictError, NotFoundError
from .rundir import (
    STREAMS,
    StoredBatch,
    acked_keys,
    iter_batches,
    read_batch,
    read_json,
    segment_paths,
)
from .settings import DEFAULT_DIR
from .spec import MAX_ERROR_CHARS, RunStatus, cut_text
from .wire import Disposition, WireClient, disposition, retrying

__all__ = ["SyncResult", "add_arguments", "find_run_dirs", "run", "sync_run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        help=f"run directories, or directories of runs (default: ./{DEFAULT_DIR})",
    )
    from .cli import add_server_options

    add_server_options(parser)
    parser.add_argument(
        "--parallel", type=int, default=4, help="runs uploaded at once (default: 4)"
    )


@dataclass
class SyncResult:
    run_dir: Path
    run_id: str
    batches: int = 0  # uploaded now (one request each)
    records: int = 0
    skipped: int = 0
    rejected: int = 0
    status: str | None = None
    errors: list[str] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .cli import server_settings

    settings = server_settings(args)
    run_dirs = find_run_dirs([Path(p) for p in args.paths] or [Path(settings.dir)])
    if not run_dirs:
        print("openruns sync: no runs found")
        return 0
    wire = WireClient.from_settings(settings)
    console = Console(stderr=True)
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console
        ) as progress:

            def one(run_dir: Path) -> SyncResult:
                tasks = []  # a bar only for a run with batches to send: never a 0/0 (issue 24)

                def on_total(n: int) -> None:
                    if n:
                        tasks.append(progress.add_task(run_dir.name, total=n))

                return sync_run(
                    wire,
                    run_dir,
                    retry_timeout=settings.retry_timeout,
                    on_total=on_total,
                    on_batch=lambda: progress.advance(tasks[0]),
                )

            with ThreadPoolExecutor(max(1, args.parallel)) as pool:
                results = list(pool.map(one, run_dirs))
    finally:
        wire.close()  # its connections (a sync called in-process, as the tests do)
    failed = False
    for result in results:
        line = (
            f"{result.run_id}: {_count(result.batches, 'batch', 'batches')} "
            f"({_count(result.records, 'record')}) uploaded, {result.skipped} already there, "
            f"status {result.status or '-'}"
        )
        if result.rejected or result.errors:
            failed = True
            line += f"; {result.rejected} rejected; " + "; ".join(result.errors)
        print(line)
    return 1 if failed else 0


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Run directories at or directly under each path."""
    found: list[Path] = []
    for path in paths:
        if _is_run_dir(path):
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if _is_run_dir(p)))
    return found


def _is_run_dir(path: Path) -> bool:
    return (path / "run.json").is_file() or any((path / s).is_dir() for s in STREAMS)


def sync_run(
    wire: WireClient,
    run_dir: Path,
    *,
    retry_timeout: float = 30.0,
    on_total: Callable[[int], Any] = lambda n: None,
    on_batch: Callable[[], Any] = lambda: None,
) -> SyncResult:
    """Upload one run directory (see the module docstring); failures are in `errors`."""
    meta = read_json(run_dir / "run.json") or {}
    result = SyncResult(run_dir, meta.get("id") or run_dir.name)
    sync = _Sync(wire, run_dir, result, retry_timeout)
    try:
        sync.ensure_run(meta)
        pending = list(sync.unacknowledged())
        on_total(len(pending))
        for stream, batch in pending:
            sync.upload(stream, batch)
            on_batch()
        if meta.get("server"):  # an online run's spool: what the server has is not kept
            for stream in STREAMS:
                _delete_acknowledged(run_dir / stream)
        result.status = sync.close(meta)
    except APIError as exc:
        result.errors.append(str(exc))
    return result


class _Sync:
    """One run directory's sync; each server call is retried for `retry_timeout`."""

    def __init__(self, wire: WireClient, run_dir: Path, result: SyncResult, retry_timeout: float):
        self.wire = wire
        self.run_dir = run_dir
        self.result = result
        self.run_id = result.run_id
        self.retry_timeout = retry_timeout

    def retried(self, call: Callable[[], Any]) -> Any:
        return retrying(call, deadline=time.monotonic() + self.retry_timeout)

    def ensure_run(self, meta: dict[str, Any]) -> None:
        try:
            self.retried(lambda: self.wire.get_run(self.run_id))
            return
        except NotFoundError:
            pass
        keys = ("kind", "name", "model", "environments", "framework", "description", "tags")
        fields = (*keys, "group", "project", "config", "training", "team_id")
        body = {k: meta[k] for k in fields if meta.get(k) is not None}
        body.setdefault("kind", "eval")
        body["id"] = self.run_id
        if isinstance(meta.get("created_at"), (int, float)):
            body["created_at"] = meta["created_at"]  # the run's own start, not the sync's
        self.retried(lambda: self.wire.create_run(body, key=self.run_id))
        step_metrics = meta.get("step_metrics")
        if isinstance(step_metrics, dict) and step_metrics:
            self.retried(lambda: self.wire.patch_run(self.run_id, {"step_metrics": step_metrics}))

    def unacknowledged(self, count_skipped: bool = True) -> Iterable[tuple[str, StoredBatch]]:
        for stream in STREAMS:
            acked = acked_keys(self.run_dir / stream)
            for path in segment_paths(self.run_dir / stream):
                for batch in iter_batches(path):
                    if batch.key not in acked:
                        yield stream, batch
                    elif count_skipped:
                        self.result.skipped += 1

    def upload(self, stream: str, batch: StoredBatch) -> None:
        stream_dir = self.run_dir / stream
        body = read_batch(stream_dir, batch)
        try:
            self.retried(lambda: self.wire.upload(self.run_id, stream, [body], key=batch.key))
        except APIError as exc:
            if disposition(exc) is not Disposition.REJECT:
                raise
            self.result.rejected += batch.records
            self.result.errors.append(f"{stream} batch {batch.segment}@{batch.offset}: {exc}")
            _append(stream_dir / "rejected.ndjson", batch.key)
            return
        self.result.batches += 1
        self.result.records += batch.records
        _append(stream_dir / "acked.ndjson", batch.key)

    def close(self, meta: dict[str, Any]) -> str | None:
        """Set the final status (with the run's own end time) and what is still not
        delivered; returns the status the server has."""
        status, error = meta.get("status"), meta.get("error")
        ended = meta.get("finished_at")
        if status == RunStatus.RUNNING.value and _owner_is_gone(meta):
            owner = meta.get("owner") or {}
            status = RunStatus.CRASHED.value
            error = (
                f"the process that owned the run (pid {owner.get('pid')} on {owner.get('host')}) "
                "ended without closing it (found by openruns sync)"
            )
            ended = _last_activity(self.run_dir)
        losses = self.losses(meta)
        if status is None or status == RunStatus.RUNNING.value:
            return status
        body: dict[str, Any] = {
            "status": status,
            # A run directory written before the limit was shared may hold a longer one.
            "error": cut_text(error, MAX_ERROR_CHARS) if isinstance(error, str) else error,
            "summary": meta.get("summary") or {},
            "losses": losses,
        }
        if isinstance(ended, (int, float)):
            body["finished_at"] = body["last_heartbeat_at"] = ended
        try:
            done = self.retried(lambda: self.wire.finish_run(self.run_id, body))
        except ConflictError:
            done = self.wire.get_run(self.run_id)  # closed before with another status
        if done.get("losses") != losses:  # it was closed before: say what arrived since
            self.retried(lambda: self.wire.patch_run(self.run_id, {"losses": losses}))
        return str(done.get("status"))

    def losses(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The run's losses as its owner recorded them, with what is still only on disk."""
        losses = dict(meta.get("losses") or {"dropped_records": 0, "failed_records": {}})
        spooled = sum(batch.records for _, batch in self.unacknowledged(count_skipped=False))
        losses["spooled_records"] = spooled
        if not spooled:
            losses.pop("spool", None)  # delivered: nothing waits there any more
        if self.result.rejected:
            failed = dict(losses.get("failed_records") or {})
            failed["server"] = failed.get("server", 0) + self.result.rejected
            losses["failed_records"] = failed
        return losses


def _last_activity(run_dir: Path) -> float | None:
    """When anything in the run directory was last written: a dead owner's last sign of life."""
    times = [p.stat().st_mtime for p in run_dir.rglob("*") if p.is_file()]
    return max(times) if times else None


def _delete_acknowledged(stream_dir: Path) -> None:
    """Delete the sealed segments whose every batch the server has (spools only)."""
    acked = acked_keys(stream_dir)
    for path in segment_paths(stream_dir):
        if path.name.endswith(".open"):
            continue  # a live writer's: not ours to delete
        if all(batch.key in acked for batch in iter_batches(path)):
            path.unlink()
    if not segment_paths(stream_dir):
        (stream_dir / "acked.ndjson").unlink(missing_ok=True)


def _owner_is_gone(meta: dict[str, Any]) -> bool:
    owner = meta.get("owner") or {}
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False  # another machine's process: it cannot be checked from here
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _append(path: Path, key: str) -> None:
    with open(path, "ab") as fh:
        fh.write(orjson.dumps({"key": key}) + b"\n")
