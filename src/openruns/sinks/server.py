"""
The server sink: batches go to the openruns server, and to the local spool when it cannot take
them.

    write(batch) --> server UP, memory left, nothing of the lane waiting in the spool:
                     queued in memory; the lane's senders (SENDERS) send in parallel
                 --> server UP, memory full: waits (the encoder, then log_* calls, feel it)
                 --> server DOWN or STOPPED, or the lane's backlog is on disk: spooled

The server's health is one state (SinkHealth). UP: senders send. DOWN: a request got no answer
(a timeout, a reset, a gateway's 502/504) or a 500: its batch goes to the spool and back to the
head of its lane, and one probe at a time retries with backoff (Retry-After honoured) until the
server answers. STOPPED: 401/403/404: nothing more is sent; everything stays in the spool for
`openruns sync` with the right key or server. Each outcome comes from `disposition`: written
(acknowledged in the spool when it was there), rejected (that batch failed, counted; the sink
goes on), retry (DOWN) or stop (STOPPED).

Busy (429 or 503: the server refused before storing anything): the server is UP but the lane
is paced: its batch goes back to the head of the lane, in memory, and for PACE_SECONDS after the
last refusal the lane sends one request at a time, the next after the Retry-After, instead of
every sender retrying at once; batches keep queueing in memory meanwhile (bounded in bytes).

Merging (upload/merging.py): a sender takes the batches of one stream waiting in its lane in
memory (never sent, or refused before anything was stored: so certainly not stored), and sends
them as one upload within merging.CAPS, keyed from their keys. Written: each part is written.
Refused (429/503): the parts go back to the lane in memory, to be merged again. A 4xx: the parts
go back, each to be sent alone, so a bad batch fails alone and the others are delivered. A
refused connection or a stop: the parts go to the spool, as a failed batch does. No answer (a
timeout, a reset, a 5xx other than 503): the merged batch may be stored, so it is kept as it is
(spooled, its key with it) and retried as one.

Memory: batches held in memory (queued or being sent) stay within `memory_bytes` (one always
fits); a batch whose send fails goes to disk, so retries come from the spool, never memory.
Order: a lane's batches are sent in the order written (metrics have one sender, so a repeated
step's last value wins on the server too).

Close sends what is left until its deadline. When the server is down as close begins, it is
probed at once; once a probe made during close has failed and the server has not answered at
all for `give_up_after` seconds (a gateway's 502/504 is not an answer), everything left stays
in the spool, which is made durable, and close returns (`gave_up`): waiting for a server that
does not answer gains nothing that `openruns sync` cannot do later. A server that refused the
connection and has never answered this run is given up at the first refused probe. A server
that answers, even with errors, is waited for until the deadline.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..batches import Batch
from ..errors import APIError, RetryableAPIError, TransportError
from ..rundir import ROW_STREAMS, Spool, SpoolRef
from ..upload.merging import CAPS, merge_batches, mergeable_prefix
from ..upload.stats import Stats
from ..wire import WireClient, backoff_delay, disposition

__all__ = ["SENDERS", "Health", "ServerSink", "SinkHealth"]

logger = logging.getLogger("openruns")

# Episodes: 8 uploads in flight, as prime-runs 0.1.6 (seed 003: on a 100 ms link 4 delivered 9,822
# of 10,000 episodes within a 60 s drain, 8 all of them); memory stays bounded in bytes.
SENDERS = {"metrics": 1, "records": 8}
MAX_PROBE_DELAY = 5.0
# After a 429/503 a lane sends one request at a time for this long (issue 21: 100 runs of one
# host retrying with nine senders each kept the server answering 429s instead of storing).
PACE_SECONDS = 10.0


class Health(enum.Enum):
    UP = "up"
    DOWN = "down"
    STOPPED = "stopped"


@dataclass
class SinkHealth:
    """What the sink knows of its server; changed only under the sink's lock."""

    state: Health = Health.UP
    failures: int = 0  # attempts in a row that got no usable answer
    error: BaseException | None = None  # the last one's error
    failed_at: float = 0.0  # when it failed (monotonic)
    retry_at: float = 0.0  # when the next probe may go
    heard_at: float = field(default_factory=time.monotonic)  # the server's last answer
    probing: bool = False
    ever_answered: bool = True  # False while a server silent since init() has never answered

    def answered(self) -> None:
        self.heard_at = time.monotonic()
        self.ever_answered = True
        if self.state is not Health.STOPPED:
            self.state, self.failures, self.error = Health.UP, 0, None

    def failed(self, error: BaseException) -> None:
        if self.state is Health.STOPPED:
            return
        now = time.monotonic()
        if getattr(error, "status_code", None) not in (None, 502, 504):
            self.heard_at = now  # busy or failing, but there (429, 500, 503)
        self.state, self.error, self.failed_at = Health.DOWN, error, now
        delay = backoff_delay(self.failures, error)  # Retry-After when the server said
        if getattr(error, "retry_after", None) is None:
            delay = min(MAX_PROBE_DELAY, delay)
        self.retry_at = now + delay
        self.failures += 1

    def stopped(self, error: BaseException) -> None:
        self.state, self.error = Health.STOPPED, error


@dataclass(eq=False)
class _Upload:
    batch: Batch | None  # in memory until spooled (then None, unless it is being sent)
    stream: str
    key: str
    records: int
    nbytes: int
    ref: SpoolRef | None = None  # on disk once spooled
    in_memory: bool = False  # counted in the sink's memory
    spooling: bool = False  # being written to the spool (by one thread: a flush or a failure)
    done: bool = False  # acknowledged or rejected: nothing more to keep
    parts: list[_Upload] = field(default_factory=list)  # a merged upload's batches, in order
    alone: bool = False  # a part of a merge the server rejected: sent by itself from now on

    @property
    def lane(self) -> str:
        return _lane(self.stream)

    @property
    def mergeable(self) -> bool:
        """Certainly not stored by the server (in memory, never spooled: never sent without
        an answer), and not a merge itself nor a part of a rejected one."""
        return (
            self.batch is not None
            and self.ref is None
            and not (self.parts or self.alone or self.spooling or self.done)
        )


@dataclass
class _Pace:
    """A lane's pacing after a 429/503: one request at a time until `until`, the next one not
    before `next_at`."""

    until: float = 0.0
    next_at: float = 0.0
    refusals: int = 0  # in a row: the backoff's attempt number when no Retry-After came


class ServerSink:
    name = "server"

    def __init__(
        self,
        wire: WireClient,
        run_id: str,
        spool: Spool,
        stats: Stats,
        *,
        memory_bytes: int,
        give_up_after: float,
        silent_since: float | None = None,
        before_first_send: Callable[[], None] | None = None,
    ):
        self.wire = wire
        self.run_id = run_id
        self.spool = spool
        self.writer_id = spool.writer_id
        self.stats = stats
        self.memory_bytes = memory_bytes
        self.give_up_after = give_up_after
        self.gave_up = False  # close left batches in the spool: the server did not answer
        self.health = SinkHealth()
        if silent_since is not None:  # the server did not answer since then (at init)
            self.health.failed(TransportError("the server did not answer when the run opened"))
            self.health.heard_at = silent_since
            self.health.ever_answered = False
        self._before_first_send = before_first_send
        self._create_lock = threading.Lock()
        # One lock for all the sink's state; senders wait on their lane's condition of it (a
        # metrics row does not wake the episode senders), everyone else on `_cond`.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._lane_ready = {lane: threading.Condition(lock) for lane in SENDERS}
        self._queues: dict[str, collections.deque[_Upload]] = {
            lane: collections.deque() for lane in SENDERS
        }
        self._on_disk = dict.fromkeys(SENDERS, 0)  # queued uploads that are only on disk
        self._sending: dict[str, set[_Upload]] = {lane: set() for lane in SENDERS}
        self._paces = {lane: _Pace() for lane in SENDERS}
        self._memory = 0
        self._close_began: float | None = None
        self._close_deadline: float | None = None  # past it, write() spools instead of waiting
        self._closed_lanes: set[str] = set()
        self._finished = False
        for lane, count in SENDERS.items():
            for _ in range(count):
                threading.Thread(
                    target=self._send_loop, args=(lane,), name=f"openruns-send-{lane}", daemon=True
                ).start()

    # -- called by the lanes' sink threads ----------------------------------------------------

    def write(self, batch: Batch) -> None:
        upload = _Upload(batch, batch.stream, batch.key, batch.records, batch.nbytes)
        lane = upload.lane
        with self._cond:
            while self.health.state is Health.UP and not self._on_disk[lane]:
                if not self._memory or self._memory + upload.nbytes <= self.memory_bytes:
                    upload.in_memory = True
                    self._memory += upload.nbytes
                    self._queues[lane].append(upload)
                    self._changed(lane)
                    return
                left = _remaining(self._close_deadline)
                if left == 0.0:
                    break  # close is due: to disk, not another wait for room
                self._cond.wait(left)
        if self._spool(upload):
            with self._cond:
                self._queues[lane].append(upload)
                self._on_disk[lane] += 1
                self._changed(lane)

    def closing(self, deadline: float | None) -> None:
        """close() is coming (after the batches still on their way): past `deadline`, a batch
        that finds no room in memory goes to the spool rather than wait."""
        with self._cond:
            if self._close_deadline is None or (
                deadline is not None and deadline < self._close_deadline
            ):
                self._close_deadline = deadline  # a signal during close hurries it (exits.py)
            self._changed()

    def flush(self, streams: tuple[str, ...], deadline: float | None) -> None:
        """Everything written before is acknowledged or on disk (durable) in the spool."""
        lane = _lane(streams[0])
        with self._cond:
            self._cond.wait_for(
                lambda: self.health.state is not Health.UP or not self._in_memory(lane),
                _remaining(deadline),
            )
            waiting = self._in_memory(lane)
        for upload in waiting:
            self._spool(upload)
        self.spool.sync(streams)

    def close(self, streams: tuple[str, ...], deadline: float | None) -> None:
        """Send what is left until `deadline` or until the server is found down (see the module
        docstring); spool the rest durably."""
        lane = _lane(streams[0])
        with self._cond:
            if self._close_began is None:
                self._close_began = time.monotonic()
                self.health.retry_at = min(self.health.retry_at, self._close_began)
                self._changed()
            while not self._settled(lane):
                left = _remaining(_earlier(deadline, self._close_deadline))
                if left == 0.0:
                    break
                # Woken by every outcome; when down, also when the silence reaches the limit.
                if self.health.state is Health.DOWN:
                    silent_until = self.health.heard_at + self.give_up_after - time.monotonic()
                    left = max(0.01, silent_until if left is None else min(silent_until, left))
                self._cond.wait(left)
            if self._queues[lane] or self._sending[lane]:
                self.gave_up = True
            waiting = self._in_memory(lane)
        for upload in waiting:
            self._spool(upload)
        self.spool.close(streams)
        with self._cond:
            self._closed_lanes.add(lane)
            self._finished = self._closed_lanes == set(SENDERS)
            self._changed()
        if self._finished and self.stats.spooled:
            logger.warning(
                "openruns: run %s has %d %s in the local spool at %s; upload them "
                "with: openruns sync %s",
                self.run_id,
                self.stats.spooled,
                "record" if self.stats.spooled == 1 else "records",
                self.spool.run_dir,
                self.spool.run_dir,
            )

    @property
    def unanswered_at_close(self) -> bool:
        """Close gave up, and the server answered nothing since close began: not worth more
        than one attempt at the final status (a flaky server that answers now and then is)."""
        with self._cond:
            began = self._close_began
            return self.gave_up and (began is None or self.health.heard_at < began)

    def drop(self) -> None:
        """After fork, in the child: the parent's threads are not here; forget its files."""
        self.spool.drop()
        self._finished = True

    # -- under the lock -----------------------------------------------------------------------

    def _settled(self, lane: str) -> bool:
        health = self.health
        if health.state is Health.STOPPED:
            return True
        if not self._queues[lane] and not self._sending[lane]:
            return True
        assert self._close_began is not None
        if health.state is not Health.DOWN:
            return False
        if health.failed_at < self._close_began:
            return False  # not tried since close began: a probe is on its way
        if not health.ever_answered and getattr(health.error, "refused", False):
            return True  # nothing has ever listened there: nothing to wait for (issue 24)
        return time.monotonic() - health.heard_at >= self.give_up_after

    def _in_memory(self, lane: str) -> list[_Upload]:
        queued = [u for u in self._queues[lane] if u.ref is None]
        return queued + [u for u in self._sending[lane] if u.ref is None]

    def _next(self, lane: str) -> _Upload | None:
        """The next upload this lane's sender may send (waits for one); None: stop."""
        queue = self._queues[lane]
        while not self._finished:
            health = self.health
            if queue and health.state is Health.UP:
                wait = self._pace_wait(lane)
                if wait == 0.0:
                    break
                self._lane_ready[lane].wait(wait)  # None: until the request in flight settles
                continue
            if queue and health.state is Health.DOWN and not health.probing:
                wait = health.retry_at - time.monotonic()
                if wait <= 0:
                    health.probing = True
                    break
                self._lane_ready[lane].wait(wait)
                continue
            self._lane_ready[lane].wait()
        else:
            return None
        upload = queue.popleft()
        if upload.ref is not None and upload.batch is None:
            self._on_disk[lane] -= 1
        if upload.mergeable:
            upload = self._merge_waiting(lane, upload)
        self._sending[lane].add(upload)
        return upload

    def _pace_wait(self, lane: str) -> float | None:
        """0.0: the lane may send now; else how long to wait (None: until a send settles)."""
        pace = self._paces[lane]
        now = time.monotonic()
        if now >= pace.until:
            return 0.0
        if self._sending[lane]:
            return None
        return max(0.0, pace.next_at - now)

    def _merge_waiting(self, lane: str, head: _Upload) -> _Upload:
        """`head` merged with the waiting uploads of its stream that may join it (see the
        module docstring), in order, within merging.CAPS; `head` alone when none may."""
        queue = self._queues[lane]
        candidates: list[_Upload] = []
        for upload in queue:
            if upload.stream != head.stream:
                continue  # another stream of the lane (console lines beside metrics)
            if not upload.mergeable or len(candidates) + 1 >= CAPS.batches:
                break  # an earlier batch of the stream must not be overtaken
            candidates.append(upload)
        count = mergeable_prefix([(u.nbytes, u.records) for u in [head, *candidates]])
        if count < 2:
            return head
        group = [head, *candidates[: count - 1]]
        taken = {id(u) for u in group}
        rest = [u for u in queue if id(u) not in taken]
        queue.clear()
        queue.extend(rest)
        batch = merge_batches([u.batch for u in group if u.batch is not None])
        return _Upload(batch, batch.stream, batch.key, batch.records, batch.nbytes, parts=group)

    def _changed(self, lane: str | None = None) -> None:
        """Wake the waiters of what changed: `lane`'s senders (every lane's when None), and
        flush, close and writes waiting for room."""
        self._cond.notify_all()
        for name, ready in self._lane_ready.items():
            if lane is None or name == lane:
                ready.notify_all()

    def _release(self, upload: _Upload) -> None:
        if upload.in_memory:
            upload.in_memory = False
            self._memory -= upload.nbytes

    # -- sender threads -----------------------------------------------------------------------

    def _send_loop(self, lane: str) -> None:
        while True:
            with self._cond:
                upload = self._next(lane)
            if upload is None:
                return
            try:
                self._send(upload)
            except _SpoolLost as exc:
                self._settle(upload, "reject", exc.__cause__ or exc)
            except APIError as exc:
                self._settle(upload, disposition(exc).value, exc)
            except Exception as exc:  # a bug of ours: keep the batch, say what happened
                self.stats.record_error("uploading a batch", exc)
                self._settle(upload, "retry", exc)
            else:
                self._settle(upload, "written", None)

    def _send(self, upload: _Upload) -> None:
        batch = upload.batch
        if batch is not None:
            parts = batch.parts
        else:
            assert upload.ref is not None
            try:
                parts = [self.spool.read(upload.ref)]
            except OSError as exc:
                raise _SpoolLost from exc
        if self._before_first_send is not None:
            with self._create_lock:
                if self._before_first_send is not None:
                    self._before_first_send()
                    self._before_first_send = None
        self.wire.upload(self.run_id, upload.stream, parts, key=upload.key)

    def _settle(self, upload: _Upload, outcome: str, error: BaseException | None) -> None:
        lane = upload.lane
        refused = outcome == "retry" and _refused(error)
        if upload.parts and (
            outcome == "reject" or (upload.ref is None and _not_stored(outcome, error))
        ):
            self._dissolve(upload, outcome, error)
            return
        if refused:
            self._requeue_refused(upload, error)
            return
        if outcome in ("written", "reject"):
            if outcome == "written":
                self.stats.count_written(upload.stream, upload.records)
            else:
                assert error is not None
                self.stats.count_failed(self.name, upload.records, error, "uploading a batch")
            with self._cond:
                upload.done, ref = True, upload.ref
                self._release(upload)
                self._forget_parts(upload)
                upload.batch = None
                recovered = self.health.state is Health.DOWN
                self.health.answered()
                self.health.probing = False
                if outcome == "written":
                    self._paces[lane].refusals = 0
            if ref is not None:  # it was in the spool too: sync must skip it
                self.spool.ack(ref, upload.key)
                self.stats.count_spooled(-upload.records)
            with self._cond:  # settled only now: close() and flush() count on it
                self._sending[lane].discard(upload)
                self._changed(None if recovered else lane)  # back up: every lane may go
            return
        assert error is not None
        kept = self._spool(upload)  # a merge that may be stored is kept whole, with its key
        with self._cond:
            self._sending[lane].discard(upload)
            upload.batch = None
            self._release(upload)
            self._forget_parts(upload)
            if outcome == "stop":
                self.health.stopped(error)
            else:
                self.health.failed(error)
            self.health.probing = False
            if kept:
                self._queues[lane].appendleft(upload)  # first again when the server is back
                self._on_disk[lane] += 1
            self._changed()
        if outcome == "stop":
            self._record_stop(error)

    def _record_stop(self, error: BaseException) -> None:
        self.stats.record_error(
            f"uploading to {self.wire.base_url} (uploads stopped; records are kept in the "
            f"spool at {self.spool.run_dir} for `openruns sync`)",
            error,
        )

    def _requeue_refused(self, upload: _Upload, error: BaseException | None) -> None:
        """429/503: nothing was stored; `upload` goes back to the head of its lane (in memory
        when it was there, else from the spool) and the lane is paced."""
        lane = upload.lane
        with self._cond:
            self._sending[lane].discard(upload)
            self._forget_parts(upload)  # a spooled merge: its spool entry is the upload now
            if upload.ref is not None:
                upload.batch = None
                self._release(upload)
                self._on_disk[lane] += 1
            self._queues[lane].appendleft(upload)
            self._refused_by_server(lane, error)

    def _dissolve(self, merged: _Upload, outcome: str, error: BaseException | None) -> None:
        """A merged upload the server did not store goes back as its parts, in order, at the
        head of its lane: each to be sent alone after a 4xx; in memory, to be merged again,
        after a 429/503; to the spool, as they were, when the server is down or stopped."""
        lane = merged.lane
        parts = merged.parts
        refused = outcome == "retry" and _refused(error)
        if merged.ref is not None or (outcome != "reject" and not refused):
            # On disk before they are back in the lane (no sender sees them half-spooled):
            # as durable as the merge was, or as a failed batch goes. A part that does not
            # fit is dropped (counted) and not sent again.
            parts = [part for part in parts if self._spool(part)]
        with self._cond:
            self._sending[lane].discard(merged)
            merged.parts, merged.batch, merged.done = [], None, True
            for part in reversed(parts):
                part.alone = part.alone or outcome == "reject"
                if part.batch is None:
                    self._on_disk[lane] += 1
                self._queues[lane].appendleft(part)
            if refused:
                self._refused_by_server(lane, error)
            else:
                if outcome == "reject":
                    self.health.answered()
                elif outcome == "stop":
                    assert error is not None
                    self.health.stopped(error)
                else:
                    assert error is not None
                    self.health.failed(error)
                self.health.probing = False
                self._changed()
        if merged.ref is not None:  # flushed while in flight: its parts are on disk instead
            self.spool.ack(merged.ref, merged.key)
            self.stats.count_spooled(-merged.records)
        if outcome == "stop":
            assert error is not None
            self._record_stop(error)

    def _refused_by_server(self, lane: str, error: BaseException | None) -> None:
        """Under the lock: the server answered 429/503; pace `lane` (see the module
        docstring)."""
        recovered = self.health.state is Health.DOWN
        self.health.answered()  # busy, but there: nothing to spool or probe for
        self.health.probing = False
        pace = self._paces[lane]
        now = time.monotonic()
        delay = backoff_delay(pace.refusals, error)  # the Retry-After when the server gave one
        if getattr(error, "retry_after", None) is None:
            delay = min(MAX_PROBE_DELAY, delay)
        pace.until, pace.next_at = now + PACE_SECONDS, now + delay
        pace.refusals += 1
        self._changed(None if recovered else lane)

    def _forget_parts(self, upload: _Upload) -> None:
        """Under the lock: a merged upload settled or kept whole: its parts' memory is free."""
        for part in upload.parts:
            part.done, part.batch = True, None
            self._release(part)
        upload.parts = []

    # -- the spool ----------------------------------------------------------------------------

    def _spool(self, upload: _Upload) -> bool:
        """Put `upload` on disk (once; memory is freed unless a send is using it). False: it
        is gone (did not fit: counted dropped, or already acknowledged)."""
        with self._cond:
            self._cond.wait_for(lambda: not upload.spooling)
            if upload.ref is not None:
                return True
            batch = upload.batch
            if upload.done or batch is None:
                return False
            upload.spooling = True
        failure: OSError | None = None
        try:
            ref = self.spool.put(batch)
        except OSError as exc:  # a full disk, say: counted like a full spool
            ref, failure = None, exc
        finally:
            with self._cond:
                upload.spooling = False
                self._cond.notify_all()
        if ref is None:
            self.stats.count_dropped(upload.records)
            self.stats.record_error(
                "spooling a batch",
                failure
                or RuntimeError(
                    f"the spool at {self.spool.run_dir} is full ({self.spool.max_bytes} bytes); "
                    "records are dropped until the server takes the backlog"
                ),
            )
            with self._cond:
                upload.batch = None
                self._release(upload)
                self._cond.notify_all()
            return False
        with self._cond:
            done = upload.done
            if not done:
                upload.ref = ref
                lane = upload.lane
                if upload not in self._sending[lane]:
                    upload.batch = None  # the spool holds it now
                    self._release(upload)
                    if upload in self._queues[lane]:
                        self._on_disk[lane] += 1
                self._changed(lane)
        if done:  # acknowledged while it was being written: nothing to keep
            self.spool.ack(ref, upload.key)
            return False
        self.stats.count_spooled(upload.records)
        return True


class _SpoolLost(Exception):
    """A spooled batch can no longer be read (its segment is gone or damaged)."""


def _refused(error: BaseException | None) -> bool:
    """A 429 or 503: the server refused the upload before storing any of it (its admission,
    its in-flight budget, a busy database: nothing is committed before a 2xx)."""
    return isinstance(error, RetryableAPIError) and error.status_code in (429, 503)


def _not_stored(outcome: str, error: BaseException | None) -> bool:
    """Whether a failed upload certainly stored nothing: a 4xx (rejected, or stopped: 401,
    403, 404), a 429/503, a refused connection or a failed TLS handshake (nothing was sent)."""
    if outcome in ("reject", "stop"):
        return True
    return _refused(error) or bool(getattr(error, "refused", False))


def _lane(stream: str) -> str:
    return "metrics" if stream in ROW_STREAMS else "records"


def _earlier(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
