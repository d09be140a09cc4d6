"""Console lines on the upload path against a fake wire client: they ride the metrics lane to
the logs route, within a budget of their own that never takes metric rows' room."""

from __future__ import annotations

import orjson
import pytest

from openruns.rundir import Spool
from openruns.sinks.server import ServerSink
from openruns.upload import pipeline as pipeline_module
from openruns.upload.pipeline import LOG_LINE_COST, Pipeline
from openruns.upload.stats import Stats

from .fakewire import FakeWire


@pytest.fixture
def make_pipeline(tmp_path):
    made: list[Pipeline] = []

    def make(wire: FakeWire, max_records: int = 1000) -> Pipeline:
        def sink(stats: Stats) -> ServerSink:
            spool = Spool(tmp_path, "w1", 10**9)
            return ServerSink(wire, "run", spool, stats, memory_bytes=10**9, give_up_after=10.0)

        pipeline = Pipeline(sink, "run", "train", max_records)
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:  # never leave threads behind
        pipeline.close(10.0)


def line(text: str, stream: str = "stdout") -> dict:
    return {"ts": 1.5, "stream": stream, "source": "main", "line": text}


def stored(wire: FakeWire, stream: str) -> list[dict]:
    return [orjson.loads(raw) for raw in wire.records(stream)]


def test_console_lines_go_to_the_logs_route_on_the_metrics_lane(make_pipeline):
    wire = FakeWire()
    pipeline = make_pipeline(wire)
    assert pipeline.put_logs([line("hello"), line("a warning", "stderr")])
    pipeline.put("metrics", {"loss": 0.5}, 1, 3, 2.0)
    assert pipeline.put_logs([line("world")])
    assert pipeline.close(10.0)
    assert stored(wire, "logs") == [line("hello"), line("a warning", "stderr"), line("world")]
    assert [row["values"] for row in stored(wire, "metrics")] == [{"loss": 0.5}]
    assert pipeline.stats.written == {"logs": 3, "metrics": 1}
    assert (pipeline.dropped, pipeline.stats.dropped_console_chars) == (0, 0)
    assert not pipeline.put_logs([line("after the close")])  # refused, nothing to count


def test_beyond_the_budget_lines_are_refused_and_counted_in_characters(make_pipeline, monkeypatch):
    monkeypatch.setattr(pipeline_module, "LOG_HELD_BYTES", 3 * (LOG_LINE_COST + 10))
    wire = FakeWire()
    pipeline = make_pipeline(wire, max_records=40)  # a quarter: 10 console lines may wait
    # One call with more than the budget holds: the first lines that fit go, the rest are
    # counted (3 lines of 10 characters fit the bytes; the fourth does not).
    assert not pipeline.put_logs([line(f"{i:010d}") for i in range(5)])
    assert pipeline.stats.dropped_console_chars == 2 * 10
    # By lines: 10 one-character lines fit the bytes but not the quarter of the queue.
    monkeypatch.setattr(pipeline_module, "LOG_HELD_BYTES", 10**9)
    assert pipeline.flush(10.0)  # encoded: the budget is free again
    assert not pipeline.put_logs([line("x") for _ in range(12)])
    assert pipeline.stats.dropped_console_chars == 2 * 10 + 2
    # Metric rows still have their room, and the lines that must not be lost skip the budget.
    for step in range(25):
        assert pipeline.put("metrics", {"loss": 1.0}, 1, step, 2.0)
    assert pipeline.put_logs([line("Traceback ...", "traceback")], budgeted=False)
    assert pipeline.close(10.0)
    texts = [row["line"] for row in stored(wire, "logs")]
    assert texts == [f"{i:010d}" for i in range(3)] + ["x"] * 10 + ["Traceback ..."]
    assert len(stored(wire, "metrics")) == 25 and pipeline.dropped == 0


def test_a_producer_that_may_wait_gets_room_as_the_encoder_frees_it(make_pipeline, monkeypatch):
    monkeypatch.setattr(pipeline_module, "LOG_HELD_BYTES", 3 * (LOG_LINE_COST + 10))
    wire = FakeWire()
    pipeline = make_pipeline(wire)
    # Five lines, room for three: the rest goes once the encoder has taken the first ones.
    assert pipeline.put_logs([line(f"{i:010d}") for i in range(5)], wait=30.0)
    assert pipeline.close(10.0)
    assert [row["line"] for row in stored(wire, "logs")] == [f"{i:010d}" for i in range(5)]
    assert pipeline.stats.dropped_console_chars == 0
