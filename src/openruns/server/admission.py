"""
Ingest admission: which uploads the server works on at once, and who waits.

The gate holds `max_requests` upload slots and `max_bytes` of their bodies. Slots are shared by
*owner*: the caller (API key, run token, or client address when auth is off) together with the
run the path names, so a hundred runs of one host are a hundred owners, each with its share,
while one client trickling uploads into one run still takes at most `per_owner` slots.

- An owner over its share (`per_owner` uploads in flight or waiting) gets 429 at once.
- When every slot is taken, an upload waits in the gate's queue, up to `queue_wait` seconds
  and at most `max_waiting` of them (its body deadlines start when it is admitted:
  limits.BodyLimit, so a wait never makes a body "slow"). A freed slot goes to the waiting
  upload whose owner has the fewest uploads in flight, among those the one whose owner was
  admitted longest ago (then the earliest come): owners take turns, so no run is starved by
  another's bulk, and a run's last upload (what its finish() waits for) goes before a busy
  run's next.
- An upload that cannot wait (the queue is full, or its wait ran out) gets 503 with a
  Retry-After from the queue as it is: the uploads ahead of it times the time an upload
  holds its slot of late, over the slots.
- While the gate is full, an upload still reading a body that has sent nothing for
  `idle_after` seconds gives its slot to the next one (it then answers 503).

The counts are this process's only (see limits.py): several replicas each admit their own.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.requests import Request

from .errors import ApiError, overloaded

__all__ = ["QUEUE_WAIT", "IngestGate", "Ticket", "ingest_owner"]

# How long an upload waits for a slot before it is told to come back (--ingest-queue-wait),
# and the most a Retry-After asks a client to wait. Both stay well under 10 s: the SDK closing
# a run gives up on a server it has not heard from for its connect timeout (10 s) and spools
# what is left for `openruns sync`, and a probe waiting in the queue is not heard from.
# Measured (benchmarks/admission_load.py): with a 20 s wait, or a 30 s Retry-After, most runs'
# finish() returned with records left in the spool. A longer queue is met in several steps.
QUEUE_WAIT = 5.0
MAX_RETRY_AFTER = 3
# Path parameters that name what an upload writes to (a run, a Prime evaluation).
_RUN_PARAMS = ("run_id", "evaluation_id")


def ingest_owner(request: Request) -> str:
    """Whose share of the upload slots a request counts against: its caller (API key or run
    token, else its client address) and the run its path names."""
    bucket = getattr(request.state, "caller_bucket", None)
    caller = (
        str(bucket)
        if bucket
        else "address:" + (request.client.host if request.client else "unknown")
    )
    for name in _RUN_PARAMS:
        if run := request.path_params.get(name):
            return f"{caller} {name}:{run}"
    return caller


class Ticket:
    """
    One admitted ingest request of `owner`; `add(n)` counts body bytes as they arrive.
    `reading` until the body is in hand: an upload that sends nothing for the gate's
    `idle_after` seconds while others wait may lose its slot (`evicted`), then answers 503.
    """

    def __init__(self, gate: IngestGate, owner: str):
        self.gate = gate
        self.owner = owner
        self.bytes = 0
        self.reading = True
        self.evicted = False
        self.admitted_at = self.last_byte_at = time.monotonic()

    def add(self, n: int) -> None:
        if self.evicted:
            raise _evicted()
        self.last_byte_at = time.monotonic()
        self.hold(n)

    def hold(self, n: int) -> None:
        """Count `n` more bytes this request holds (its body, then its decoded body) in the
        in-flight budget: 503 when the server holds too much already."""
        self.bytes += n
        self.gate.bytes += n
        # A request alone in the gate is never refused, however big: it would be refused forever.
        if self.gate.bytes > self.gate.max_bytes and self.gate.bytes > self.bytes:
            raise overloaded(
                "the server has too many upload bytes in flight; retry shortly",
                retry_after=self.gate.retry_after(),
            )

    def body_read(self) -> None:
        """The body is in hand: from now on the request works, it no longer waits on its
        client, and keeps its slot."""
        if self.evicted:
            raise _evicted()
        self.reading = False


@dataclass(eq=False)
class _Waiter:
    owner: str
    order: int
    admitted: asyncio.Future[Ticket] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class IngestGate:
    """The upload slots of one server process (see the module docstring)."""

    def __init__(
        self,
        max_requests: int,
        max_bytes: int,
        per_owner: int | None = None,
        idle_after: float = 0.0,
        queue_wait: float = QUEUE_WAIT,
        max_waiting: int | None = None,
    ):
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.per_owner = per_owner if per_owner else max_requests
        self.idle_after = idle_after
        self.queue_wait = queue_wait
        self.max_waiting = max_waiting if max_waiting is not None else 8 * max_requests
        self.bytes = 0
        self._tickets: set[Ticket] = set()
        self._active: dict[str, int] = {}  # owner -> uploads in flight
        self._owned: dict[str, int] = {}  # owner -> uploads in flight or waiting
        self._served: dict[str, int] = {}  # owner (while it owns any) -> its last admission
        self._admissions = itertools.count()
        self._waiting: list[_Waiter] = []  # in arrival order
        self._order = itertools.count()
        self._hold_s = 0.5  # how long an upload holds its slot, of late (a moving average)

    @property
    def active(self) -> int:
        return len(self._tickets)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def in_flight(self, owner: str) -> int:
        return self._active.get(owner, 0)

    def retry_after(self) -> int:
        """Seconds until a slot is likely free for a newcomer: the uploads in flight and
        waiting, each holding a slot for the recent average, through the slots."""
        ahead = len(self._tickets) + len(self._waiting)
        seconds = ahead * self._hold_s / max(1, self.max_requests)
        return min(MAX_RETRY_AFTER, max(1, math.ceil(seconds)))

    @asynccontextmanager
    async def admit(self, owner: str) -> AsyncIterator[Ticket]:
        """Hold a slot for `owner` while the block runs: at once when one is free and nobody
        waits, else after a wait in the queue (429 or 503 as the module docstring says)."""
        if self._owned.get(owner, 0) >= self.per_owner:
            raise ApiError(
                429,
                "too_many_uploads",
                f"this caller already has {self.per_owner} uploads in flight or waiting for this "
                "run, the most it may have at once; retry when one has finished",
                {"Retry-After": str(self.retry_after())},
            )
        if not self._waiting and (len(self._tickets) < self.max_requests or self._evict_idle()):
            ticket = self._hold(owner)
        else:
            ticket = await self._wait(owner)
        try:
            yield ticket
        finally:
            self._release(ticket)
            held = time.monotonic() - ticket.admitted_at
            self._hold_s += (held - self._hold_s) / 16
            self._admit_waiting()

    async def _wait(self, owner: str) -> Ticket:
        if len(self._waiting) >= self.max_waiting:
            raise overloaded(
                f"the server has {len(self._waiting)} uploads waiting for a slot already; "
                "retry later",
                retry_after=self.retry_after(),
            )
        waiter = _Waiter(owner, next(self._order))
        self._waiting.append(waiter)
        self._owned[owner] = self._owned.get(owner, 0) + 1
        if len(self._tickets) >= self.max_requests:
            self._evict_idle()
        self._admit_waiting()
        try:
            if self.queue_wait > 0:
                await asyncio.wait_for(asyncio.shield(waiter.admitted), self.queue_wait)
        except TimeoutError:
            pass
        except BaseException:  # the client went away: give back what it was given
            self._give_up(waiter)
            raise
        if not waiter.admitted.done():
            self._give_up(waiter)
            raise overloaded(
                f"every upload slot stayed taken for {self.queue_wait:g} s; retry later",
                retry_after=self.retry_after(),
            )
        return waiter.admitted.result()

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter leaves: out of the queue, or its slot back when it had just got one."""
        if waiter.admitted.done():
            self._release(waiter.admitted.result())
            self._admit_waiting()
        else:
            waiter.admitted.cancel()
            self._waiting.remove(waiter)
            self._disown(waiter.owner)

    def _admit_waiting(self) -> None:
        """Give free slots to waiting uploads: fewest in flight, then owners' turns."""
        while self._waiting and len(self._tickets) < self.max_requests:
            waiter = min(
                self._waiting,
                key=lambda w: (
                    self._active.get(w.owner, 0),
                    self._served.get(w.owner, -1),
                    w.order,
                ),
            )
            self._waiting.remove(waiter)
            self._disown(waiter.owner)
            waiter.admitted.set_result(self._hold(waiter.owner))

    def _hold(self, owner: str) -> Ticket:
        ticket = Ticket(self, owner)
        self._tickets.add(ticket)
        self._active[owner] = self._active.get(owner, 0) + 1
        self._owned[owner] = self._owned.get(owner, 0) + 1
        self._served[owner] = next(self._admissions)
        return ticket

    def _release(self, ticket: Ticket) -> None:
        if ticket not in self._tickets:
            return  # evicted: its slot and bytes were given back then
        self._tickets.discard(ticket)
        self.bytes -= ticket.bytes
        left = self._active[ticket.owner] - 1
        if left:
            self._active[ticket.owner] = left
        else:
            del self._active[ticket.owner]
        self._disown(ticket.owner)

    def _disown(self, owner: str) -> None:
        left = self._owned[owner] - 1
        if left:
            self._owned[owner] = left
        else:
            del self._owned[owner]
            self._served.pop(owner, None)

    def _evict_idle(self) -> bool:
        """Take the slot of the upload idle longest, if one has sent nothing for idle_after."""
        if self.idle_after <= 0:
            return False
        now = time.monotonic()
        idle = [t for t in self._tickets if t.reading and now - t.last_byte_at >= self.idle_after]
        if not idle:
            return False
        victim = min(idle, key=lambda t: t.last_byte_at)
        self._release(victim)
        victim.evicted = True
        return True


def _evicted() -> ApiError:
    return overloaded(
        "this upload sent nothing for too long while others waited, and lost its slot; retry",
        retry_after=1,
    )
