"""Monitors: concurrent fan-out; a failing or slow monitor reaches neither caller nor others."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from openruns.monitors import Monitor, Monitors
from openruns.monitors import worker as worker_module

from .helpers import episode


class Recording(Monitor):
    """Records its calls. `gate`: each call first waits until the gate is opened, so a test can
    hold a monitor stuck for as long as it needs without depending on how fast the machine is."""

    def __init__(
        self,
        name: str,
        delay: float = 0.0,
        fail: bool = False,
        gate: threading.Event | None = None,
    ):
        self.name = name
        self.delay = delay
        self.fail = fail
        self.gate = gate
        self.calls: list[tuple] = []
        self.threads: set[str] = set()
        self.finalized = False

    def _wait(self) -> None:
        if self.gate is not None:
            self.gate.wait()
        time.sleep(self.delay)

    def log_metrics(self, values, step):
        self.threads.add(threading.current_thread().name)
        self._wait()
        if self.fail:
            raise OSError("disk on fire")
        self.calls.append(("metrics", values, step))

    def log_episodes(self, episodes, step, kind, subset):
        self._wait()
        if self.fail:
            raise OSError("disk on fire")
        self.calls.append(("episodes", [e["id"] for e in episodes], step, kind, subset))

    def finalize(self):
        self.finalized = True


class BrokenSetup(Recording):
    def setup(self):
        raise RuntimeError("no such project")


def test_every_monitor_gets_every_call_in_order_on_its_own_thread():
    a, b = Recording("a"), Recording("b")

    async def main():
        monitors = Monitors([a, b])
        await monitors.log({"x": 1, "y": {"z": 2}}, step=0)
        await monitors.log(episode(0), step=0, kind="eval", subset="all")  # one episode
        await monitors.log((episode(i) for i in (1, 2)), step=1)  # any iterable
        await monitors.log([], step=1)  # nothing to do
        await monitors.finalize()

    asyncio.run(main())
    expected = [
        ("metrics", {"x": 1, "y/z": 2}, 0),
        ("episodes", ["ep-0"], 0, "eval", "all"),
        ("episodes", ["ep-1", "ep-2"], 1, "train", "effective"),
    ]
    assert a.calls == b.calls == expected
    assert a.finalized and b.finalized
    assert a.threads == {"openruns-monitor-a"} and b.threads == {"openruns-monitor-b"}


def test_a_failing_monitor_warns_with_its_name_and_never_raises(caplog):
    good, bad = Recording("good"), Recording("bad", fail=True)

    async def main():
        monitors = Monitors([bad, good])
        for step in range(3):
            await monitors.log({"x": step}, step=step)
        await monitors.finalize()
        return monitors

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        monitors = asyncio.run(main())
    assert [c[2] for c in good.calls] == [0, 1, 2]
    assert monitors.stats["bad"].failed == 3 and monitors.stats["good"].logged == 3
    messages = [r.getMessage() for r in caplog.records]
    assert (
        messages.count(
            "openruns monitors: bad monitor failed to log metrics: OSError: disk on fire"
        )
        == 1
    )


def test_a_stuck_monitor_delays_neither_the_caller_nor_the_others():
    release = threading.Event()
    fast, stuck = Recording("fast"), Recording("stuck", gate=release)

    async def main():
        monitors = Monitors([stuck, fast])
        for step in range(4):
            await monitors.log({"x": step}, step=step)  # returns although "stuck" never moved
        while len(fast.calls) < 4:
            await asyncio.sleep(0.005)
        stuck_calls_then = len(stuck.calls)
        release.set()
        await monitors.finalize()
        return stuck_calls_then

    stuck_calls_then = asyncio.run(main())
    assert stuck_calls_then == 0  # the fast monitor finished while the stuck one had done nothing
    assert [c[2] for c in fast.calls] == [0, 1, 2, 3]
    assert [c[2] for c in stuck.calls] == [0, 1, 2, 3]  # finalize waited for the stuck one


def test_a_full_queue_waits_then_drops_for_that_monitor_only(monkeypatch, caplog):
    monkeypatch.setattr(worker_module, "MAX_PENDING_ROWS", 2)
    monkeypatch.setattr(worker_module, "PUT_TIMEOUT_SECONDS", 0.2)
    release = threading.Event()
    stuck, fine = Recording("stuck", gate=release), Recording("fine")

    async def main():
        monitors = Monitors([stuck, fine])
        # "stuck" takes nothing until released: every log() past its queue's room can only
        # return by giving up after the put timeout, so reaching the next line proves the
        # wait is bounded (an unbounded wait would hang here until pytest's timeout).
        for step in range(5):
            await monitors.log({"x": step}, step=step)
        dropped_while_stuck = monitors.stats["stuck"].dropped
        release.set()
        await monitors.finalize()
        return monitors, dropped_while_stuck

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        monitors, dropped_while_stuck = asyncio.run(main())
    stats = monitors.stats
    assert stats["fine"].logged == 5
    assert dropped_while_stuck >= 1
    assert stats["stuck"].logged + stats["stuck"].dropped == 5
    assert sum("stuck monitor dropped" in r.getMessage() for r in caplog.records) == 1


def test_a_monitor_that_cannot_set_up_is_disabled_and_counts_what_it_drops(caplog):
    broken, fine = BrokenSetup("broken"), Recording("fine")

    async def main():
        monitors = Monitors([broken, fine])
        await monitors.log({"x": 1}, step=0)
        await monitors.log([episode(0), episode(1)], step=0)
        await monitors.finalize()
        return monitors

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        monitors = asyncio.run(main())
    assert monitors.stats["broken"].dropped == 3 and not broken.finalized
    assert monitors.stats["fine"].logged == 3
    assert any(
        "broken monitor failed to set up: RuntimeError: no such project" in r.getMessage()
        for r in caplog.records
    )


def test_a_synchronous_trainer_may_use_asyncio_run_per_call():
    recorder = Recording("r", delay=0.05)
    monitors = Monitors([recorder])
    for step in range(3):
        asyncio.run(monitors.log({"x": step}, step=step))  # each call on a fresh, closed loop
    asyncio.run(monitors.finalize())
    assert [c[2] for c in recorder.calls] == [0, 1, 2]


def test_misuse_raises():
    async def main():
        monitors = Monitors([Recording("r")])
        with pytest.raises(ValueError):
            await monitors.log([episode(0)], step=0, kind="rl")
        with pytest.raises(TypeError):
            await monitors.log({"x": 1}, step="3")
        with pytest.raises(TypeError):
            await monitors.log("episodes", step=0)
        await monitors.finalize()
        with pytest.raises(RuntimeError, match="after finalize"):
            await monitors.log({"x": 1}, step=0)

    asyncio.run(main())


def test_finalize_timeout_names_the_monitor_still_working(caplog):
    release = threading.Event()

    async def main():
        monitors = Monitors([Recording("slow", gate=release)])
        await monitors.log({"x": 1}, step=0)
        # "slow" is held until finalize has returned: returning at all proves the timeout.
        await monitors.finalize(timeout=0.1)
        release.set()

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        asyncio.run(main())
    assert any("slow did not finish within 0.1 s" in r.getMessage() for r in caplog.records)


def test_a_monitor_is_handed_only_the_episodes_it_wants():
    class MetricsOnly(Recording):
        def wants_episodes(self, kind, subset):
            return kind == "eval"

    picky, everything = MetricsOnly("picky"), Recording("all")

    async def main():
        monitors = Monitors([picky, everything])
        await monitors.log([episode(0)], step=0, kind="train")
        await monitors.log([episode(1)], step=0, kind="eval")
        await monitors.finalize()
        return monitors

    monitors = asyncio.run(main())
    assert [c[1] for c in picky.calls] == [["ep-1"]]
    assert [c[1] for c in everything.calls] == [["ep-0"], ["ep-1"]]
    assert monitors.stats["picky"].logged == 1  # the train episode never reached it
