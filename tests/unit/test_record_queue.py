"""
The record queue's lifecycle path is safe inside a signal handler (issue 24): a SIGTERM handler
runs on the main thread on top of whatever it was doing, possibly a `put` holding the
producers' lock or waking the encoder, and queues close's stop from there. Here the "signal"
lands at every line a put executes, its own and those of whatever it calls, by a trace
function on the producing thread, as the interpreter would run a handler between bytecodes.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

from openruns.upload.queue import Item, RecordQueue


def _barrier(name: str) -> Item:
    return Item("barrier", name, 0, None, 0.0)


def _interrupt_every_line(queue: RecordQueue, action: Any) -> list[tuple[str, int]]:
    """Call `action` as a handler would, at each distinct line run inside queue.put (and in
    the functions it calls), once per line; the (function, line) places it ran at."""
    put_code = RecordQueue.put.__code__
    places: list[tuple[str, int]] = []
    busy = False

    def inside_put(frame: FrameType | None) -> bool:
        while frame is not None:
            if frame.f_code is put_code:
                return True
            frame = frame.f_back
        return False

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal busy
        place = (frame.f_code.co_name, frame.f_lineno)
        if event == "line" and not busy and place not in places:
            places.append(place)
            busy = True
            try:
                action()
            finally:
                busy = False
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if not busy and inside_put(frame) else None

    sys.settrace(tracer)
    try:
        queue.put("episodes", ["record"], 1, 3, 0.0)
    finally:
        sys.settrace(None)
    return places


def test_a_barrier_queued_from_inside_a_put_neither_waits_nor_breaks_the_queue():
    queue = RecordQueue(max_records=100)
    queue.put("metrics", {"loss": 1.0}, 1, 1, 0.0)  # taken before the interrupted put
    done = threading.Event()
    places: list[tuple[str, int]] = []
    barriers = iter(range(10_000))

    def producer() -> None:
        places.extend(
            _interrupt_every_line(queue, lambda: queue.put_control(_barrier(f"b{next(barriers)}")))
        )
        done.set()

    # A daemon thread: were the handler to wait on a lock the put holds, it would wait forever.
    threading.Thread(target=producer, daemon=True).start()
    assert done.wait(30), "queueing a barrier from inside a put waited on the put"
    assert len(places) >= 5, places  # the handler really ran at many points of the put

    items = list(queue.take_all())
    data = [i for i in items if i.kind != "barrier"]
    controls = [i.payload for i in items if i.kind == "barrier"]
    # Every call is whole (its head with its own payload), and every barrier is there, in order.
    assert [(i.kind, i.payload, i.records, i.step) for i in data] == [
        ("metrics", {"loss": 1.0}, 1, 1),
        ("episodes", ["record"], 1, 3),
    ]
    assert controls == [f"b{n}" for n in range(len(places))]
    assert queue.accepted == 2


def test_a_barrier_follows_every_call_put_before_it_and_lifecycle_records_are_counted():
    queue = RecordQueue(max_records=2)
    assert queue.put("episodes", ["a"], 1, 0, 0.0)
    assert queue.put("episodes", ["b"], 1, 1, 0.0)
    assert not queue.put("episodes", ["c"], 1, 2, 0.0)  # past the bound: refused, counted
    queue.put_control(Item("logs", ["last line"], 1, None, 0.0))  # never refused
    queue.put_control(_barrier("flush"))
    queue.wait(None)  # returns at once: something is queued
    items = [(i.kind, i.payload) for i in queue.take_all()]
    assert items == [
        ("episodes", ["a"]),
        ("episodes", ["b"]),
        ("logs", ["last line"]),
        ("barrier", "flush"),
    ]
    assert (queue.accepted, queue.dropped) == (3, 1)


def test_the_encoder_sleeps_until_a_put_wakes_it():
    queue = RecordQueue(max_records=10)
    woke = threading.Event()

    def encoder() -> None:
        queue.wait(None)
        woke.set()

    thread = threading.Thread(target=encoder, daemon=True)
    thread.start()
    assert not woke.wait(0.2)  # nothing queued: it sleeps
    queue.put("traces", ["t"], 1, None, 0.0)
    assert woke.wait(30)
    assert [i.payload for i in queue.take_all()] == [["t"]]
