"""
Deleting a run with everything it owns (issue 22): the order of the steps, and the blobs.

    tomb = await delete_run(state, run, by="key:3")   # the run is gone, then purged

1. One transaction removes the run's row and writes its tombstone (store/deletion.py): every
   lookup answers 404 from then on, a new run with its id is a 409 naming the deletion, and an
   upload that read the run before stores nothing (sql.lock_run).
2. Its rows go in slices (store/deletion.STAGES), each slice its own transaction; the blobs a
   slice's rows named are deleted after it commits.
3. Whatever is left under the run's blob folder `runs/<seq>/` is deleted too: the blob of an
   upload whose rows never committed (a crash, or the refusal of step 1).
4. The tombstone records what was removed, and when.

The purge runs as a task of its own, so a caller that hangs up does not stop it; a server that
stops mid-purge leaves it to `purge_forever` (every replica runs one), which takes up any purge
silent for PURGE_LEASE. A crash between a slice's commit and its blobs' deletion leaves
unreferenced blobs, which `openruns server check --remove-unreferenced` removes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .errors import ApiError, not_found
from .state import ServerState
from .store import deletion
from .store.blobs import BlobStore
from .store.rows import RunRow

__all__ = ["delete_blobs", "delete_run", "purge", "purge_forever"]

logger = logging.getLogger("openruns.server")

# The purges under way in this process (a task is only weakly held by the event loop).
_PURGES: dict[int, asyncio.Task[dict[str, int]]] = {}


async def delete_run(state: ServerState, run: RunRow, by: str | None) -> dict[str, Any]:
    """Delete `run` and wait for its purge; the tombstone with what was removed. 404 when
    another request deleted it first."""
    tomb = await state.store.write(deletion.mark_deleted, run["seq"], by, time.time())
    if tomb is None:
        raise not_found(f"no run {run['id']!r}")
    tomb["removed"] = await asyncio.shield(_start(state, run["seq"]))
    tomb["purged"] = True
    return tomb


def _start(state: ServerState, run_seq: int) -> asyncio.Task[dict[str, int]]:
    task = _PURGES.get(run_seq)
    if task is None:
        task = asyncio.create_task(purge(state, run_seq), name=f"openruns-purge-{run_seq}")
        _PURGES[run_seq] = task
        task.add_done_callback(lambda _: _PURGES.pop(run_seq, None))
    return task


async def purge(state: ServerState, run_seq: int) -> dict[str, int]:
    """Remove every row and blob of the deleted run `run_seq` (steps 2 to 4 of the module)."""
    removed: dict[str, int] = {"blobs": 0, "blob_bytes": 0}
    stage = 0
    while stage < len(deletion.STAGES):
        stage, step = await state.store.write(
            deletion.purge_step, run_seq, stage, deletion.PURGE_ROWS, time.time()
        )
        for name, rows in step.rows.items():
            removed[name] = removed.get(name, 0) + rows
        if step.blobs:
            await asyncio.to_thread(delete_blobs, state.blobs, [k for k, _ in step.blobs])
            removed["blobs"] += len(step.blobs)
            removed["blob_bytes"] += sum(size for _, size in step.blobs)
    removed["unreferenced_blobs"] = await asyncio.to_thread(
        _delete_folder, state.blobs, f"runs/{run_seq}/"
    )
    await state.store.write(deletion.finish_purge, run_seq, removed, time.time())
    return removed


def delete_blobs(blobs: BlobStore, keys: list[str]) -> None:
    """Delete `keys` (blocking: call off the event loop); a missing one is no error."""
    for key in keys:
        blobs.delete(key)


def _delete_folder(blobs: BlobStore, folder: str) -> int:
    keys = [info.key for info in blobs.list_blobs(folder)]
    delete_blobs(blobs, keys)
    return len(keys)


async def purge_forever(state: ServerState, interval: float = deletion.PURGE_LEASE / 4) -> None:
    """Take up interrupted purges: at start, then every `interval` seconds."""
    while True:
        try:
            for run_seq in await state.store.read(deletion.unpurged, time.time()):
                if run_seq not in _PURGES:
                    logger.info("openruns: resuming the purge of deleted run seq %d", run_seq)
                    await _start(state, run_seq)
        except ApiError as exc:  # the database is busy or unreachable: the next tick retries
            logger.warning("openruns: purge of deleted runs skipped: %s", exc.message)
        except Exception:
            logger.warning("openruns: the purge of deleted runs failed; retrying", exc_info=True)
        await asyncio.sleep(interval)
