"""
`openruns sync [PATHS...]`: upload offline runs and leftover spools of online runs.

For each run directory: create the run on the server if it is not there (the id is the one the
run was given at init, so this is idempotent), upload every frame the server has not
acknowledged (each with its Idempotency-Key, so an interrupted sync, or a frame the live process
had already sent, is never stored twice), then set the final status from run.json. A run whose
owner died without closing it (SIGKILL, a lost node) is closed as crashed. Acknowledged frames
are recorded in `<stream>/acked.ndjson`, so a second sync uploads nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .errors import APIError, BadRequestError, ConflictError, NotFoundError
from .rundir import STREAMS, Frame, iter_frames, read_json, segment_paths, upload_target
from .settings import DEFAULT_DIR, Settings
from .spec import RunStatus
from .upload.http import ApiClient, retrying

__all__ = ["SyncResult", "add_arguments", "find_run_dirs", "run", "sync_run"]

RETRY_PATIENCE = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        help=f"run directories, or directories of runs (default: ./{DEFAULT_DIR})",
    )
    parser.add_argument("--base-url", help="the server (default: OPENRUNS_BASE_URL)")
    parser.add_argument("--api-key", help="an API key (default: OPENRUNS_API_KEY)")
    parser.add_argument(
        "--parallel", type=int, default=4, help="runs uploaded at once (default: 4)"
    )


@dataclass
class SyncResult:
    run_dir: Path
    run_id: str
    frames: int = 0
    records: int = 0
    skipped: int = 0
    rejected: int = 0
    status: str | None = None
    errors: list[str] = field(default_factory=list)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    settings = Settings.resolve({"base_url": args.base_url, "api_key": args.api_key})
    if not settings.base_url:
        sys.exit("openruns sync: no server; pass --base-url or set OPENRUNS_BASE_URL")
    run_dirs = find_run_dirs([Path(p) for p in args.paths] or [Path(settings.dir)])
    if not run_dirs:
        print("openruns sync: no runs found")
        return 0
    client = ApiClient(settings.base_url, settings.api_key)
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console
    ) as progress:

        def one(run_dir: Path) -> SyncResult:
            task = progress.add_task(run_dir.name, total=None)
            return sync_run(
                client,
                run_dir,
                on_total=lambda n: progress.update(task, total=n),
                on_frame=lambda: progress.advance(task),
            )

        with ThreadPoolExecutor(max(1, args.parallel)) as pool:
            results = list(pool.map(one, run_dirs))
    failed = False
    for result in results:
        line = (
            f"{result.run_id}: {result.frames} batches ({result.records} records) uploaded, "
            f"{result.skipped} already there, status {result.status or '-'}"
        )
        if result.rejected or result.errors:
            failed = True
            line += f"; {result.rejected} rejected; " + "; ".join(result.errors)
        print(line)
    return 1 if failed else 0


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
    client: ApiClient,
    run_dir: Path,
    on_total: Any = lambda n: None,
    on_frame: Any = lambda: None,
) -> SyncResult:
    meta = read_json(run_dir / "run.json") or {}
    result = SyncResult(run_dir, meta.get("id") or run_dir.name)
    try:
        _ensure_run(client, result.run_id, meta)
        pending = list(_unacknowledged(run_dir, result))
        on_total(len(pending))
        for stream, frame in pending:
            _upload(client, run_dir, result, stream, frame)
            on_frame()
        result.status = _close(client, result.run_id, meta)
    except APIError as exc:
        result.errors.append(str(exc))
    return result


def _ensure_run(client: ApiClient, run_id: str, meta: dict[str, Any]) -> None:
    try:
        retrying(lambda: client.request("GET", f"/runs/{run_id}"), deadline=_deadline())
        return
    except NotFoundError:
        pass
    keys = ("kind", "name", "model", "environments", "framework", "description", "tags", "group")
    body = {k: meta[k] for k in (*keys, "config", "training", "team_id") if meta.get(k) is not None}
    body.setdefault("kind", "eval")
    body["id"] = run_id
    retrying(
        lambda: client.request("POST", "/runs", json=body, headers={"Idempotency-Key": run_id}),
        deadline=_deadline(),
    )


def _unacknowledged(run_dir: Path, result: SyncResult) -> Iterable[tuple[str, Frame]]:
    for stream in STREAMS:
        acked = _acked_keys(run_dir / stream)
        for path in segment_paths(run_dir / stream):
            for frame in iter_frames(path):
                if frame.key in acked:
                    result.skipped += 1
                else:
                    yield stream, frame


def _acked_keys(stream_dir: Path) -> set[str]:
    keys: set[str] = set()
    for name in ("acked.ndjson", "rejected.ndjson"):
        path = stream_dir / name
        if path.exists():
            for line in path.read_bytes().splitlines():
                try:
                    keys.add(orjson.loads(line)["key"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn last line
    return keys


def _upload(
    client: ApiClient, run_dir: Path, result: SyncResult, stream: str, frame: Frame
) -> None:
    headers = {
        "Idempotency-Key": frame.key,
        "Content-Type": "application/x-ndjson",
        "Content-Encoding": "zstd",
    }
    path, extra = upload_target(result.run_id, stream)
    headers.update(extra)
    records = frame.data.count(b"\n")
    try:
        retrying(
            lambda: client.request("POST", path, content=frame.compressed, headers=headers),
            deadline=_deadline(),
        )
    except (BadRequestError, ConflictError) as exc:
        result.rejected += records
        result.errors.append(f"{stream} batch {frame.segment}@{frame.offset}: {exc}")
        _append(run_dir / stream / "rejected.ndjson", frame.key)
        return
    result.frames += 1
    result.records += records
    _append(run_dir / stream / "acked.ndjson", frame.key)


def _close(client: ApiClient, run_id: str, meta: dict[str, Any]) -> str | None:
    status, error = meta.get("status"), meta.get("error")
    if status == RunStatus.RUNNING.value and _owner_is_gone(meta):
        owner = meta.get("owner") or {}
        status = RunStatus.CRASHED.value
        error = (
            f"the process that owned the run (pid {owner.get('pid')} on {owner.get('host')}) "
            "ended without closing it (found by openruns sync)"
        )
    if status is None or status == RunStatus.RUNNING.value:
        return status
    body = {
        "status": status,
        "error": error,
        "summary": meta.get("summary") or {},
        "losses": meta.get("losses") or {},
    }
    try:
        retrying(
            lambda: client.request("POST", f"/runs/{run_id}/finish", json=body),
            deadline=_deadline(),
        )
    except ConflictError:
        current = client.request("GET", f"/runs/{run_id}")
        return str(current.get("status"))  # closed before with another status; theirs stands
    return status


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


def _deadline() -> float:
    import time

    return time.monotonic() + RETRY_PATIENCE
