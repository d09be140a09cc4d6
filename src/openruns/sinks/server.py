"""
The server sink: batches go to the openruns server, up to MAX_IN_FLIGHT requests at once per
lane, and to the local spool whenever the server is slow or unreachable.

    write(batch) --> compress (zstd-1 frame), key = sha256(uncompressed)
                 --> a free sender slot, nothing spooled ahead of it: POST now
                 --> otherwise: append the frame to the spool (run directory format) and
                     send it from there when a slot frees and the server answers again

A send is retried in place for a few seconds (Retry-After honoured); then the server counts as
unhealthy, the batch moves to the spool, and one probe at a time retries the oldest spooled
batch with backoff until the server answers, after which the backlog drains. Memory therefore
holds at most MAX_IN_FLIGHT frames per lane whatever the network does: the spool on disk takes
the rest, up to its byte budget, beyond which batches are dropped and counted.

Outcomes: 2xx -> written. 400/409/413/415/422 -> that batch failed (counted), the sink goes on.
401/403/404 -> sending stops with the error in run.errors; everything goes to the spool, for
`openruns sync` with the right key or server. Whatever is in flight at close's deadline is
spooled too: the spool plus the Idempotency-Key make every outcome safe to replay.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import zstandard

from ..errors import (
    APIError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)
from ..rundir import ROW_STREAMS, SegmentWriter, upload_target
from ..upload.encoder import Batch
from ..upload.http import ApiClient, backoff_delay, retryable, retrying
from ..upload.stats import Stats
from .local import compress_batch, new_compressor

__all__ = ["ServerSink"]

logger = logging.getLogger("openruns")

MAX_IN_FLIGHT = {"metrics": 2, "records": 8}
# How long one send retries in place before its batch moves to the spool.
SEND_PATIENCE = 5.0
MAX_PROBE_DELAY = 5.0
# At close, how long a server that answers nothing is waited for before the rest stays spooled.
GIVE_UP_AFTER = 30.0
_STOPPING = (UnauthorizedError, ForbiddenError, NotFoundError)
_REJECTED = (BadRequestError, ConflictError)


@dataclass
class _Upload:
    stream: str
    key: str
    count: int
    frame: bytes | None  # in memory until spooled
    spooled_at: tuple[str, int, int] | None = None  # (segment, offset, length) once on disk


def _lane(stream: str) -> str:
    return "metrics" if stream in ROW_STREAMS else "records"


class ServerSink:
    name = "server"

    def __init__(
        self,
        client: ApiClient,
        run_id: str,
        spool_dir: Path,
        writer_id: str,
        stats: Stats,
        *,
        spool_bytes: int,
        gzip_only: bool = False,
        before_first_send: Callable[[], None] | None = None,
    ):
        self.client = client
        self.run_id = run_id
        self.spool_dir = spool_dir
        self.writer_id = writer_id
        self.stats = stats
        self.spool_bytes = spool_bytes
        self.gzip_only = gzip_only
        self._before_first_send = before_first_send
        self._compressors: dict[str, zstandard.ZstdCompressor] = {}
        self._cond = threading.Condition()
        self._in_flight = {lane: 0 for lane in MAX_IN_FLIGHT}
        self._unspooled = {lane: 0 for lane in MAX_IN_FLIGHT}  # in flight, only in memory
        self._pending: dict[int, _Upload] = {}
        self._backlog: dict[str, collections.deque[_Upload]] = {
            lane: collections.deque() for lane in MAX_IN_FLIGHT
        }
        self._healthy = True
        self._failures = 0
        self._unhealthy_since: float | None = None
        self._stopped: str | None = None
        self._closing = threading.Event()
        self._spool_lock = threading.Lock()
        self._spool_writers: dict[str, SegmentWriter] = {}
        self._spooled_bytes = 0
        self._closed_lanes: set[str] = set()
        self._work: queue.Queue[_Upload] = queue.Queue()
        self._senders = [
            threading.Thread(target=self._send_loop, name="openruns-sender", daemon=True)
            for _ in range(sum(MAX_IN_FLIGHT.values()))
        ]
        for thread in self._senders:
            thread.start()

    # -- called by the lanes' sink threads ----------------------------------------------------

    def write(self, batch: Batch) -> None:
        compressor = self._compressors.setdefault(batch.stream, new_compressor())
        frame = compress_batch(batch, compressor)
        digest = hashlib.sha256()
        for part in batch.parts:
            digest.update(part)
        upload = _Upload(batch.stream, "sha256:" + digest.hexdigest(), batch.count, frame)
        lane = _lane(batch.stream)
        with self._cond:
            if self._can_send(lane) and not self._backlog[lane]:
                self._dispatch(lane, upload)
                return
        self._spool(upload)
        with self._cond:
            self._pump(lane)

    def flush(self, streams: tuple[str, ...], deadline: float | None) -> None:
        """Everything written before is acknowledged or on disk in the spool."""
        lane = _lane(streams[0])
        with self._cond:
            self._cond.wait_for(lambda: self._unspooled[lane] == 0, _remaining(deadline))
        self._spool_in_flight(lane)
        with self._spool_lock:
            for stream in streams:
                if stream in self._spool_writers:
                    self._spool_writers[stream].sync()

    def close(self, streams: tuple[str, ...], deadline: float | None) -> None:
        """
        Send everything (spooled backlog included) until `deadline`, or until the server has
        not answered for GIVE_UP_AFTER seconds (the rest is safe in the spool, and a process
        exiting while its server is down should not wait out the whole drain budget); spool
        what is left.
        """
        lane = _lane(streams[0])
        close_started = time.monotonic()

        def settled() -> bool:
            if self._stopped is not None:
                return True
            if self._in_flight[lane] == 0 and not self._backlog[lane]:
                return True
            # Silence counts from close at the earliest: a server that just came back gets the
            # full grace for a probe to find it.
            down_since = self._unhealthy_since
            if down_since is None:
                return False
            return time.monotonic() - max(down_since, close_started) > GIVE_UP_AFTER

        with self._cond:
            while not settled():
                left = _remaining(deadline)
                if left == 0.0:
                    break
                self._cond.wait(1.0 if left is None else min(1.0, left))
        self._spool_in_flight(lane)
        with self._spool_lock:
            for stream in streams:
                writer = self._spool_writers.pop(stream, None)
                if writer is not None:
                    writer.close()
            self._closed_lanes.add(lane)
            if self._closed_lanes != set(MAX_IN_FLIGHT):
                return
        # Both lanes are closed: senders stop; a request still running settles on its own
        # (its batch is already on disk, so nothing more is written).
        self._closing.set()
        if self.stats.spooled:
            logger.warning(
                "openruns: %d records of run %s are in the local spool at %s; upload them "
                "with: openruns sync %s",
                self.stats.spooled,
                self.run_id,
                self.spool_dir,
                self.spool_dir,
            )

    def drop(self) -> None:
        with self._spool_lock:
            for writer in self._spool_writers.values():
                writer.drop()
            self._spool_writers = {}
        self.client.drop()
        self._closing.set()  # the parent's sender threads do not exist in the child

    # -- scheduling (under self._cond) --------------------------------------------------------

    def _can_send(self, lane: str) -> bool:
        return (
            self._stopped is None and self._healthy and self._in_flight[lane] < MAX_IN_FLIGHT[lane]
        )

    def _dispatch(self, lane: str, upload: _Upload) -> None:
        self._in_flight[lane] += 1
        if upload.spooled_at is None:
            self._unspooled[lane] += 1
        self._pending[id(upload)] = upload
        self._work.put(upload)

    def _pump(self, lane: str) -> None:
        """Start sends from the backlog: all free slots when healthy, one probe when not."""
        backlog = self._backlog[lane]
        while backlog and self._stopped is None and not self._closing.is_set():
            if self._healthy and self._in_flight[lane] < MAX_IN_FLIGHT[lane]:
                self._dispatch(lane, backlog.popleft())
            elif not self._healthy and sum(self._in_flight.values()) == 0:
                self._dispatch(lane, backlog.popleft())  # the probe
                return
            else:
                return

    # -- sender threads -----------------------------------------------------------------------

    def _send_loop(self) -> None:
        while not self._closing.is_set():
            try:
                upload = self._work.get(timeout=0.5)
            except queue.Empty:
                continue
            self._send(upload)

    def _send(self, upload: _Upload) -> None:
        lane = _lane(upload.stream)
        if not self._healthy:
            delay = min(MAX_PROBE_DELAY, backoff_delay(self._failures))
            if self._closing.wait(delay):
                self._settle(upload, lane, "spool")
                return
        outcome = "spool"
        try:
            body = self._body(upload)
            if self._before_first_send is not None:
                retrying(self._before_first_send, deadline=time.monotonic() + SEND_PATIENCE)
                self._before_first_send = None
            retrying(
                lambda: self._post(upload, body),
                deadline=time.monotonic() + SEND_PATIENCE,
                stop=self._closing,
            )
            outcome = "written"
        except _REJECTED as exc:
            self.stats.count_failed(self.name, upload.count, exc, "uploading a batch")
            outcome = "rejected"
        except _STOPPING as exc:
            self._stop(exc)
        except APIError as exc:
            if not retryable(exc):
                self.stats.count_failed(self.name, upload.count, exc, "uploading a batch")
                outcome = "rejected"
        except Exception as exc:  # a bug of ours: keep the batch, say what happened
            if not self._closing.is_set():  # after close the client is gone; the batch is spooled
                self.stats.record_error("uploading a batch", exc)
        self._settle(upload, lane, outcome)

    def _settle(self, upload: _Upload, lane: str, outcome: str) -> None:
        if outcome == "spool" and upload.spooled_at is None:
            self._spool(upload)
        if outcome == "written":
            self.stats.count_written(upload.stream, upload.count)
        if outcome != "spool" and upload.spooled_at is not None:
            self._ack(upload)
            self.stats.count_spooled(-upload.count)
        with self._cond:
            self._pending.pop(id(upload), None)
            self._in_flight[lane] -= 1
            if outcome == "spool":
                self._failures += 1
                self._healthy = False
                if self._unhealthy_since is None:
                    self._unhealthy_since = time.monotonic()
                if upload.spooled_at is not None and not self._closing.is_set():
                    self._backlog[lane].appendleft(upload)
            else:
                self._failures = 0
                self._healthy = True
                self._unhealthy_since = None
            self._unspooled[lane] = sum(
                1 for u in self._pending.values() if _lane(u.stream) == lane and not u.spooled_at
            )
            for name in MAX_IN_FLIGHT:
                self._pump(name)
            self._cond.notify_all()

    def _post(self, upload: _Upload, body: bytes) -> None:
        headers = {
            "Idempotency-Key": upload.key,
            "Content-Type": "application/x-ndjson",
            "Content-Encoding": "gzip" if self.gzip_only else "zstd",
        }
        path, extra = upload_target(self.run_id, upload.stream)
        headers.update(extra)
        self.client.request("POST", path, content=body, headers=headers)

    def _body(self, upload: _Upload) -> bytes:
        frame = upload.frame if upload.frame is not None else self._read_spooled(upload)
        if not self.gzip_only:
            return frame
        return gzip.compress(zstandard.ZstdDecompressor().decompress(frame), 1, mtime=0)

    def _stop(self, exc: APIError) -> None:
        with self._cond:
            if self._stopped is None:
                self._stopped = f"{type(exc).__name__}: {exc}"
        self.stats.record_error(
            f"uploading to {self.client.base_url} (uploads stopped; records are kept in the "
            f"spool at {self.spool_dir} for `openruns sync`)",
            exc,
        )

    # -- the spool ----------------------------------------------------------------------------

    def _spool(self, upload: _Upload) -> None:
        with self._spool_lock:
            frame = upload.frame
            if frame is None or upload.spooled_at is not None:
                return  # already on disk (or dropped): close and a failing send can race here
            if self._spooled_bytes + len(frame) > self.spool_bytes:
                self.stats.count_dropped(upload.count)
                self.stats.record_error(
                    "spooling a batch",
                    RuntimeError(
                        f"the spool at {self.spool_dir} is full ({self.spool_bytes} bytes); "
                        "records are dropped until the server takes the backlog"
                    ),
                )
                upload.frame = None
                return
            writer = self._spool_writers.get(upload.stream)
            if writer is None:
                writer = SegmentWriter(self.spool_dir / upload.stream, self.writer_id)
                self._spool_writers[upload.stream] = writer
            segment, offset = writer.append(frame)
            self._spooled_bytes += len(frame)
            upload.spooled_at = (segment, offset, len(frame))
            upload.frame = None  # memory goes back; the frame is read from disk when sent
        self.stats.count_spooled(upload.count)
        lane = _lane(upload.stream)
        with self._cond:
            if id(upload) not in self._pending:
                self._backlog[lane].append(upload)

    def _spool_in_flight(self, lane: str) -> None:
        """Put every in-flight upload of `lane` that exists only in memory on disk."""
        with self._cond:
            only_in_memory = [
                u
                for u in self._pending.values()
                if _lane(u.stream) == lane and u.spooled_at is None and u.frame is not None
            ]
        for upload in only_in_memory:
            self._spool(upload)

    def _read_spooled(self, upload: _Upload) -> bytes:
        assert upload.spooled_at is not None
        segment, offset, length = upload.spooled_at
        stream_dir = self.spool_dir / upload.stream
        for name in (segment + ".open", segment):
            try:
                with open(stream_dir / name, "rb") as fh:
                    fh.seek(offset)
                    return fh.read(length)
            except FileNotFoundError:
                continue
        raise FileNotFoundError(f"spooled segment {segment} is gone from {stream_dir}")

    def _ack(self, upload: _Upload) -> None:
        """Record that a spooled batch reached the server, so `openruns sync` skips it."""
        line = orjson.dumps({"key": upload.key}) + b"\n"
        with self._spool_lock, open(self.spool_dir / upload.stream / "acked.ndjson", "ab") as fh:
            fh.write(line)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
