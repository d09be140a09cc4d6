"""The server sink against a fake wire client: retries, the spool, order, memory, stop, close."""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from openruns.batches import Batch
from openruns.errors import (
    BadRequestError,
    RetryableAPIError,
    TransportError,
    UnauthorizedError,
)
from openruns.rundir import Spool, acked_keys, iter_batches, segment_paths
from openruns.sinks import server as sink_module
from openruns.sinks.server import Health, ServerSink
from openruns.upload.batching import BatchAssembler, FrameCutter
from openruns.upload.merging import MERGE_KEY_PREFIX
from openruns.upload.stats import Stats

from .fakewire import FakeWire


def batch(stream: str, *values: int) -> Batch:
    cutter, assembler = FrameCutter(stream, 1 << 30), BatchAssembler(stream)
    for value in values:
        line = [orjson.dumps({"id": f"r{value}", "v": value}), b"\n"]
        row = None if stream == "metrics" else {"id": f"r{value}"}
        for work in cutter.add(line, row):
            assembler.add(work)
    out = assembler.add(cutter.cut())
    assert out is not None
    return out


def values(wire: FakeWire, stream: str) -> list[int]:
    return [orjson.loads(line)["v"] for line in wire.records(stream)]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(sink_module, "MAX_PROBE_DELAY", 0.0)  # probes at once: milliseconds


@pytest.fixture
def make_sink(tmp_path):
    sinks: list[ServerSink] = []

    def make(wire: FakeWire, **options) -> ServerSink:
        spool = Spool(tmp_path, "w1", options.pop("spool_bytes", 10**9))
        options.setdefault("memory_bytes", 10**9)
        options.setdefault("give_up_after", 10.0)
        sink = ServerSink(wire, "run", spool, Stats(), **options)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:  # never leave sender threads behind
        for streams in (("metrics",), ("episodes", "traces")):
            if sink._closed_lanes != {"metrics", "records"}:
                sink.close(streams, deadline=0.0)


def close(sink: ServerSink, timeout: float = 10.0) -> None:
    for streams in (("metrics",), ("episodes", "traces")):
        sink.close(streams, time.monotonic() + timeout)


def test_everything_is_delivered_once_and_in_order_through_transient_failures(make_sink):
    wire = FakeWire()
    wire.fail_next("upload", RetryableAPIError("busy", 503, retry_after=0.0), times=2)
    wire.fail_next("upload", TransportError("reset"), times=2)
    lost_answer = TransportError("stored, but the answer was lost")

    def stored_then_lost() -> None:
        raise lost_answer

    wire.fail_next("upload", stored_then_lost, times=3)
    sink = make_sink(wire)
    for i in range(50):
        sink.write(batch("metrics", i))
    close(sink)
    assert values(wire, "metrics") == list(range(50))  # each once, in the order written
    stats = sink.stats
    assert (stats.written, stats.failed, stats.dropped, stats.spooled) == (
        {"metrics": 50},
        {},
        0,
        0,
    )
    assert sink.health.state is Health.UP and not sink.gave_up


def test_a_down_server_gets_the_spool_then_everything_from_it(make_sink, tmp_path):
    wire = FakeWire()
    down = threading.Event()
    wire.fail_next("upload", TransportError("connection refused"), times=10**6)  # down
    sink = make_sink(wire)
    for i in range(20):
        sink.write(batch("episodes", i))
    sink.flush(("episodes", "traces"), deadline=None)
    assert sink.health.state is Health.DOWN and sink.stats.spooled == 20
    on_disk = [b.records for p in segment_paths(tmp_path / "episodes") for b in iter_batches(p)]
    assert sum(on_disk) == 20  # durable in the run directory, for `openruns sync` too
    wire._failures["upload"].clear()  # the server is back
    down.set()
    for i in range(20, 25):
        sink.write(batch("episodes", i))
    close(sink)
    assert sorted(values(wire, "episodes")) == list(range(25))
    assert sink.stats.spooled == 0 and sink.stats.written == {"episodes": 25}
    assert segment_paths(tmp_path / "episodes") == []  # acknowledged: deleted
    assert sink.spool.bytes_used == 0


def test_a_rejected_batch_is_counted_and_the_rest_goes_on(make_sink):
    wire = FakeWire()
    wire.reject_lines(lambda line: b'"v":0' in line, BadRequestError("line 3: invalid JSON", 400))
    sink = make_sink(wire)
    for i in range(5):
        sink.write(batch("metrics", i))
    close(sink)
    assert values(wire, "metrics") == [1, 2, 3, 4]
    assert sink.stats.failed == {"server": 1}
    assert "invalid JSON" in sink.stats.errors[0]


def test_a_wrong_key_stops_sending_and_keeps_everything_for_sync(make_sink, tmp_path):
    wire = FakeWire()
    wire.fail_next("upload", UnauthorizedError("bad key", 401))
    sink = make_sink(wire)
    for i in range(6):
        sink.write(batch("metrics", i))
    close(sink)
    assert wire.records("metrics") == [] and sink.health.state is Health.STOPPED
    assert sink.stats.spooled == 6 and sink.gave_up
    assert "openruns sync" in sink.stats.errors[0]
    assert len(wire.calls) == 1  # nothing more was tried


def test_close_gives_up_on_a_silent_server_with_everything_durable(make_sink, tmp_path):
    wire = FakeWire()
    wire.fail_next("upload", TransportError("connection refused"), times=10**6)
    sink = make_sink(wire, give_up_after=0.0, silent_since=0.0)  # down since init
    for i in range(4):
        sink.write(batch("metrics", i))
    close(sink, timeout=300)  # the budget is not waited out
    assert sink.gave_up and sink.stats.spooled == 4
    assert acked_keys(tmp_path / "metrics") == set()
    assert sum(b.records for p in segment_paths(tmp_path / "metrics") for b in iter_batches(p)) == 4


def test_memory_held_never_passes_the_bound(make_sink):
    wire = FakeWire()
    release = threading.Event()
    wire.fail_next("upload", lambda: release.wait(10), times=10**6)  # stores, then hangs
    one = batch("episodes", 0).nbytes
    sink = make_sink(wire, memory_bytes=3 * one)
    peak = 0
    writer = threading.Thread(target=lambda: [sink.write(batch("episodes", i)) for i in range(20)])
    writer.start()
    for _ in range(200):
        peak = max(peak, sink._memory)
        writer.join(0.001)
    assert writer.is_alive()  # the writer waits for room: the pipeline upstream feels it
    release.set()
    writer.join(10)
    close(sink)
    assert peak <= 3 * one + one // 2 and sorted(values(wire, "episodes")) == list(range(20))


def test_a_full_spool_drops_counts_and_names_it(make_sink):
    wire = FakeWire()
    down = TransportError("connection refused")
    down.refused = True  # nothing was sent: a merge of these goes back as its parts
    wire.fail_next("upload", down, times=10**6)
    one = batch("metrics", 0).nbytes
    sink = make_sink(wire, spool_bytes=2 * one, give_up_after=0.0)
    for i in range(5):
        sink.write(batch("metrics", i))
    close(sink)
    assert sink.stats.spooled == 2 and sink.stats.dropped == 3
    assert any("spool" in e and "full" in e for e in sink.stats.errors)


def test_the_spool_takes_new_batches_once_its_backlog_is_delivered(make_sink, tmp_path):
    wire = FakeWire()
    one = batch("metrics", 0).nbytes
    sink = make_sink(wire, spool_bytes=5 * one)  # a backlog of 3, and 1 behind it
    for outage in range(3):  # each outage fills the spool; each recovery empties it
        wire.fail_next("upload", TransportError("connection refused"), times=10**6)
        for i in range(3):
            sink.write(batch("metrics", 10 * outage + i))
        sink.flush(("metrics",), deadline=None)
        assert sink.stats.spooled == 3 and sink.spool.bytes_used >= one  # maybe one merge
        wire._failures["upload"].clear()
        sink.write(batch("metrics", 10 * outage + 9))  # behind the backlog, in order
        sink.flush(("metrics",), deadline=None)
        while sink.stats.spooled:
            sink.flush(("metrics",), deadline=None)
        assert sink.spool.bytes_used == 0 and segment_paths(tmp_path / "metrics") == []
    close(sink)
    assert sink.stats.dropped == 0
    assert values(wire, "metrics") == [
        v for o in range(3) for v in (10 * o, 10 * o + 1, 10 * o + 2, 10 * o + 9)
    ]


def test_a_full_disk_under_the_spool_is_counted_and_the_sink_goes_on(make_sink, monkeypatch):
    wire = FakeWire()
    wire.fail_next("upload", TransportError("reset"), times=2)  # two batches need the spool
    sink = make_sink(wire)
    put = sink.spool.put
    calls = {"n": 0}

    def full_disk(batch):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return put(batch)

    monkeypatch.setattr(sink.spool, "put", full_disk)
    sink.write(batch("metrics", 0))  # alone: its failure finds the disk full
    wait_for(lambda: sink.stats.dropped)
    for i in range(1, 6):
        sink.write(batch("metrics", i))
    close(sink)
    assert sink.stats.dropped == 1 and any("No space left" in e for e in sink.stats.errors)
    assert len(values(wire, "metrics")) == 5 and sink.stats.spooled == 0


class TimedWire(FakeWire):
    """A FakeWire that notes when each upload began and ended, and what it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[float, float, str, str]] = []  # (began, ended, key, outcome)

    def upload(self, run_id, stream, parts, *, key, timeout=None):
        began = time.monotonic()
        try:
            answer = super().upload(run_id, stream, parts, key=key, timeout=timeout)
        except Exception as exc:
            self.spans.append((began, time.monotonic(), key, getattr(exc, "status_code", "-")))
            raise
        self.spans.append((began, time.monotonic(), key, "ok"))
        return answer


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the sink never got there"
        time.sleep(0.005)


def test_batches_waiting_behind_a_slow_request_go_as_one_merged_request(make_sink):
    wire = FakeWire()
    release = threading.Event()
    wire.fail_next("upload", lambda: release.wait(10))  # the first upload is answered late
    sink = make_sink(wire)
    sink.write(batch("metrics", 0))  # the metrics lane: one sender
    wait_for(lambda: wire.calls)
    for i in range(1, 8):
        sink.write(batch("metrics", i))
        if i % 2:
            sink.write(batch("logs", i))  # another stream of the lane, between them
    release.set()
    close(sink)
    assert values(wire, "metrics") == list(range(8))  # each once, in order
    assert values(wire, "logs") == [1, 3, 5, 7]
    stored = wire.stored["metrics"]
    assert [h["records"] for h in stored] == [1, 7]  # the seven that waited: one request
    assert stored[1]["key"].startswith(MERGE_KEY_PREFIX)
    assert [h["records"] for h in wire.stored["logs"]] == [4]
    assert sink.stats.written == {"logs": 4, "metrics": 8} and sink.stats.spooled == 0
    assert sink._memory == 0


def test_a_merged_request_without_an_answer_is_replayed_whole_and_stored_once(make_sink):
    wire = FakeWire()
    release = threading.Event()
    wire.fail_next("upload", lambda: release.wait(10))

    def stored_then_lost() -> None:
        raise TransportError("stored, but the answer was lost")

    wire.fail_next("upload", stored_then_lost)  # the merge: stored, its answer lost
    sink = make_sink(wire)
    sink.write(batch("metrics", 0))
    wait_for(lambda: wire.calls)
    for i in range(1, 6):
        sink.write(batch("metrics", i))
    release.set()
    close(sink)
    keys = [key for method, key in wire.calls if method == "upload"]
    assert keys[1] == keys[2] and keys[1].startswith(MERGE_KEY_PREFIX)  # replayed as it was
    assert values(wire, "metrics") == list(range(6))  # stored once
    assert sink.stats.written == {"metrics": 6} and sink.stats.spooled == 0


def test_a_rejected_merge_is_split_so_only_the_bad_batch_fails(make_sink):
    wire = FakeWire()
    release = threading.Event()
    wire.fail_next("upload", lambda: release.wait(10))
    wire.reject_lines(lambda line: b'"v":3' in line, BadRequestError("line 1: bad value", 400))
    sink = make_sink(wire)
    sink.write(batch("metrics", 0))
    wait_for(lambda: wire.calls)
    for i in range(1, 6):
        sink.write(batch("metrics", i, 10 + i))
    release.set()
    close(sink)
    assert values(wire, "metrics") == [0, 1, 11, 2, 12, 4, 14, 5, 15]  # in order
    assert sink.stats.failed == {"server": 2}  # batch 3 (records 3 and 13), with its reason
    assert any("bad value" in e for e in sink.stats.errors)
    assert sink.stats.written == {"metrics": 9} and sink.stats.spooled == 0


def test_after_a_429_a_lane_sends_one_request_at_a_time_after_retry_after(make_sink, monkeypatch):
    monkeypatch.setattr(sink_module, "PACE_SECONDS", 60.0)  # the whole test is paced
    wire = TimedWire()
    busy = RetryableAPIError("too many uploads", 429, retry_after=0.2)
    wire.fail_next("upload", busy, times=3)
    sink = make_sink(wire)
    for i in range(40):
        sink.write(batch("episodes", i))
        time.sleep(0.002)  # a producer logging, while the server refuses
    close(sink)
    assert sorted(values(wire, "episodes")) == list(range(40))  # each once
    assert sink.stats.spooled == 0 and sink.health.state is Health.UP  # kept in memory
    spans = sorted(wire.spans)
    refusals = [span for span in spans if span[3] == 429]
    assert len(refusals) == 3
    for refused in refusals:  # nothing began between a 429 and its Retry-After
        later = [span[0] for span in spans if span[0] >= refused[1]]
        assert all(began >= refused[1] + 0.2 * 0.99 for began in later)
    paced = [span for span in spans if span[0] >= refusals[0][1]]
    for before, after in zip(paced, paced[1:], strict=False):
        assert after[0] >= before[1], "two requests of a paced lane were in flight at once"
    assert len(paced) < 40  # the waiting batches went merged
