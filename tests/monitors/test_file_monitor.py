"""The file monitor: metrics rows, an episode stream in sealed zstd chunks, its index, recovery."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import zstandard

from openruns.monitors import FileMonitorConfig, FileMonitorReader, Monitors, MonitorsConfig

from .. import patience
from .helpers import episode

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _monitors(out: Path, chunk_bytes: int = 10_000, producer: str = "orchestrator") -> Monitors:
    config = MonitorsConfig(file=FileMonitorConfig(chunk_bytes=chunk_bytes))
    return Monitors.from_config(config, producer=producer, output_dir=out)


async def _log(monitors: Monitors, episodes, step: int = 0, subset: str = "effective") -> None:
    for e in episodes:
        await monitors.log([e], step=step, kind="train", subset=subset)


def test_round_trip_through_chunk_rolls_and_sealing(tmp_path):
    episodes = [episode(i, size=3_000, step=i // 4) for i in range(20)]

    async def main():
        monitors = _monitors(tmp_path)
        await monitors.log({"loss": 0.5, "nested": {"a": 1}}, step=0)
        await monitors.log({"lag": 0.01}, step=None)
        await monitors.log(episodes[:10], step=0)  # one call, several episodes
        await _log(monitors, episodes[10:], subset="all")
        await monitors.finalize()
        return monitors

    monitors = asyncio.run(main())
    assert monitors.stats["file"].logged == 22 and monitors.stats["file"].errors == []
    stream = tmp_path / "monitors" / "file" / "episodes"
    chunks = sorted(p.name for p in stream.iterdir())
    assert len(chunks) > 3 and all(name.endswith(".jsonl.zst") for name in chunks)
    assert not any(".open." in name for name in chunks)  # finalize sealed the last chunk
    assert all(p.stat().st_size <= 10_000 for p in stream.iterdir())

    reader = FileMonitorReader(tmp_path)
    rows = reader.index()
    assert [r["line"] for r in rows] == list(range(1, 21))
    assert [r["id"] for r in rows] == [e["id"] for e in episodes]
    assert rows[3] | {"time": 0} == {
        "line": 4, "chunk": rows[3]["chunk"], "offset": rows[3]["offset"],
        "size": rows[3]["size"], "id": "ep-3", "step": 0, "kind": "train",
        "subset": "effective", "env": "math-basic", "reward": 0.3, "ok": False, "tokens": 13,
        "producer": "orchestrator", "time": 0,
    }  # fmt: skip
    assert rows[12]["subset"] == "all" and rows[12]["step"] == 3  # its run.work.step
    assert [reader.read(r) for r in rows] == episodes
    assert list(reader.episodes()) == episodes
    metrics = reader.metrics()
    assert [(m["step"], m["producer"]) for m in metrics] == [
        (0, "orchestrator"),
        (None, "orchestrator"),
    ]
    assert metrics[0]["loss"] == 0.5 and metrics[0]["nested/a"] == 1

    # The shell reads the stream too.
    shell = subprocess.run(
        f"zstd -dc {stream}/*.zst | jq -c .id", shell=True, capture_output=True, text=True
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == [f'"{e["id"]}"' for e in episodes]


def test_a_relaunch_continues_the_numbering(tmp_path):
    asyncio.run(_run_and_finalize(tmp_path, range(5)))
    asyncio.run(_run_and_finalize(tmp_path, range(5, 8)))
    rows = FileMonitorReader(tmp_path).index()
    assert [r["line"] for r in rows] == list(range(1, 9))
    assert [r["id"] for r in rows] == [f"ep-{i}" for i in range(8)]
    chunks = [r["chunk"] for r in rows]
    assert chunks == sorted(chunks) and chunks[5] > chunks[4]  # a new chunk after a relaunch


async def _run_and_finalize(out: Path, indices) -> None:
    monitors = _monitors(out, chunk_bytes=1 << 20)
    await _log(monitors, [episode(i) for i in indices])
    await monitors.finalize()


CRASHING_WRITER = """
import asyncio, os, signal, sys
sys.path.insert(0, {tests!r})
from monitors.helpers import episode
from openruns.monitors import FileMonitorConfig, Monitors, MonitorsConfig

async def main():
    config = MonitorsConfig(file=FileMonitorConfig(chunk_bytes=1 << 20))
    monitors = Monitors.from_config(config, producer="orchestrator", output_dir={out!r})
    for i in range(6):
        await monitors.log([episode(i)], step=0)
    while monitors.stats["file"].logged < 6:
        await asyncio.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)  # no finalize: the chunk stays open

asyncio.run(main())
"""


def test_a_crash_mid_chunk_leaves_a_readable_stream_that_a_relaunch_recovers(tmp_path):
    code = CRASHING_WRITER.format(tests=str(Path(__file__).parents[1]), out=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        timeout=patience.EXIT,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stream = tmp_path / "monitors" / "file" / "episodes"
    (open_chunk,) = stream.iterdir()
    assert open_chunk.name == "00000.open.jsonl.zst"
    # What a crash mid-write can leave besides: a whole frame whose index row was never written
    # (episode 6), a torn frame (episode 7) and a torn index row.
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    frame = compressor.compress(orjson.dumps(episode(6)) + b"\n")
    torn = compressor.compress(orjson.dumps(episode(7)) + b"\n")
    with open_chunk.open("ab") as fh:
        fh.write(frame + torn[: len(torn) // 2])
    index = tmp_path / "monitors" / "file" / "episodes.index.jsonl"
    with index.open("ab") as fh:
        fh.write(b'{"line": 7, "chun')  # a torn index row

    # Readable as it is: the whole frames, the torn tail ignored.
    reader = FileMonitorReader(tmp_path)
    assert [r["id"] for r in reader.index()] == [f"ep-{i}" for i in range(6)]
    assert [e["id"] for e in reader.episodes()] == [f"ep-{i}" for i in range(7)]

    # A relaunch seals the crashed chunk, indexes the orphan frame, continues the numbering.
    asyncio.run(_run_and_finalize(tmp_path, range(8, 10)))
    rows = FileMonitorReader(tmp_path).index()
    assert [r["id"] for r in rows] == ["ep-0", "ep-1", "ep-2", "ep-3", "ep-4", "ep-5", "ep-6",
                                       "ep-8", "ep-9"]  # fmt: skip
    assert [r["line"] for r in rows] == list(range(1, 10))
    assert rows[6]["recovered"] is True and rows[6]["reward"] == 0.6
    assert [reader.read(r)["id"] for r in rows] == [r["id"] for r in rows]
    assert sorted(p.name for p in stream.iterdir()) == ["00000.jsonl.zst", "00001.jsonl.zst"]
    shell = subprocess.run(
        f"zstd -dc {stream}/*.zst | jq -r .id", shell=True, capture_output=True, text=True
    )
    assert shell.returncode == 0 and shell.stdout.split() == [r["id"] for r in rows]


def test_subsets_and_nonfinite_metrics(tmp_path, caplog):
    async def main():
        config = MonitorsConfig(file=FileMonitorConfig(subsets=("all",)))
        monitors = Monitors.from_config(config, producer="trainer", output_dir=tmp_path)
        await monitors.log([episode(0)], step=0, subset="effective")  # not written
        await monitors.log([episode(1)], step=0, subset="all")
        await monitors.log({"loss": float("nan"), "ok": 1.0, "inf": {"x": float("inf")}}, step=1)
        await monitors.log({"loss": float("nan")}, step=2)
        await monitors.finalize()

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        asyncio.run(main())
    reader = FileMonitorReader(tmp_path)
    assert [r["id"] for r in reader.index()] == ["ep-1"]
    assert [{k: v for k, v in m.items() if k != "time"} for m in reader.metrics()] == [
        {"ok": 1.0, "step": 1, "producer": "trainer"},
        {"step": 2, "producer": "trainer"},
    ]
    warnings = [r.getMessage() for r in caplog.records if "not finite" in r.getMessage()]
    assert len(warnings) == 1  # each key named once
    assert "loss (nan)" in warnings[0] and "inf/x (inf)" in warnings[0]


def test_two_live_writers_of_one_stream_are_refused(tmp_path, caplog):
    async def main():
        first, second = _monitors(tmp_path, producer="a"), _monitors(tmp_path, producer="b")
        await first.log([episode(0)], step=0)
        while first.stats["file"].logged < 1:
            await asyncio.sleep(0.01)
        await second.log([episode(1)], step=0)
        await second.log({"x": 1}, step=0)  # metrics still work
        await second.finalize()
        await first.finalize()
        return second

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        second = asyncio.run(main())
    assert second.stats["file"].failed == 1
    assert "being written by another live process" in second.stats["file"].errors[0]
    assert [r["id"] for r in FileMonitorReader(tmp_path).index()] == ["ep-0"]
    assert len(FileMonitorReader(tmp_path).metrics()) == 1


class VerifiersLikeEpisode:
    """An object with verifiers' to_record(float_decimals=): it rounds its own streams."""

    def __init__(self, logprobs):
        self.logprobs = logprobs
        self.asked = None

    def to_record(self, float_decimals=4):
        self.asked = float_decimals
        return {
            "id": "obj",
            "nodes": [{"logprobs": [round(x, float_decimals) for x in self.logprobs]}],
        }


def test_float_columns_are_rounded_and_annotations_kept_per_producer(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRUNS_RUN_ID", "the-run")
    logprobs = [-0.123456789, -1.000049, -2.5]
    streamed = {
        "id": "ep",
        "reward": 0.123456789,  # a scalar: never rounded
        "traces": [{"nodes": [{"token_ids": [1, 2, 3], "logprobs": logprobs}]}],
    }
    obj = VerifiersLikeEpisode(logprobs)

    async def main(producer, decimals, annotations):
        config = MonitorsConfig(file=FileMonitorConfig(float_decimals=decimals))
        monitors = Monitors.from_config(config, producer=producer, output_dir=tmp_path / producer)
        if producer == "orchestrator":
            await monitors.log([streamed, obj], step=0)
        await monitors.log_annotations(annotations)
        await monitors.finalize()
        return monitors

    trainer_facts = [
        {"episode_id": "ep", "step": 1, "branches": [{"index": 0, "entropies": [0.987654]}]}
    ]
    asyncio.run(main("orchestrator", 2, [{"episode_id": "ep", "info": {"effective": True}}]))
    asyncio.run(main("trainer", None, trainer_facts))

    reader = FileMonitorReader(tmp_path / "orchestrator")
    first, second = list(reader.episodes())
    assert first["traces"][0]["nodes"][0] == {
        "token_ids": [1, 2, 3],
        "logprobs": [-0.12, -1.0, -2.5],
    }
    assert first["reward"] == 0.123456789
    assert obj.asked == 2 and second["nodes"][0]["logprobs"] == [-0.12, -1.0, -2.5]
    assert streamed["traces"][0]["nodes"][0]["logprobs"] == logprobs  # the producer's: untouched
    annotations = reader.annotations()
    assert list(annotations) == ["orchestrator"]
    assert annotations["orchestrator"][0]["info"] == {"effective": True}
    kept = FileMonitorReader(tmp_path / "trainer").annotations()["trainer"]
    assert kept[0]["branches"] == [{"index": 0, "entropies": [0.987654]}]  # None: every digit
    index = (tmp_path / "trainer/monitors/file/annotations/trainer.index.jsonl").read_text()
    assert orjson.loads(index.splitlines()[0])["episode_id"] == "ep"
    link = orjson.loads((tmp_path / "trainer" / "monitors" / "file" / "run.json").read_bytes())
    assert link["id"] == "the-run" and link["url"].endswith("/trainer/monitors/file")
