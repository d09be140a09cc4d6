"""
The file monitor: metrics rows and an episode stream under `<output_dir>/monitors/file/`.

    metrics.jsonl            {"step", "time", "producer", "<key>": number, ...} per log call;
                             every process of a launch may append to the same file (one write
                             per row, O_APPEND), readers merge rows by (step, producer)
    episodes/, episodes.index.jsonl   the episode stream (chunks.py)
    annotations/<producer>/, annotations/<producer>.index.jsonl
                             each producer's annotation stream (one writer each), as prime-rl's
                             file monitor keeps them
    run.json                 the link record: the openruns run this process logs to, if any

Per-token float streams of episodes and annotations are rounded to `float_decimals` on disk.

Episodes are encoded by the SDK's encoder in GIL-sized pieces (`iter_pieces`: never joined, the
GIL released between pieces) streamed straight into zstd (which releases the GIL), on the
monitor's thread: the producer's event loop waits for neither, even on a 60 MB episode.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import zstandard

from ...identity import RUN_ID_ENV
from ...records import index_fields, to_mapping
from ...upload.encoder import iter_pieces, yield_gil
from ..base import Monitor, PartialFailure, write_link
from ..config import FileMonitorConfig
from .chunks import ChunkWriter

__all__ = ["FileMonitor", "file_monitor_dir"]

# zstd level 1: on a 2-core machine level 3 halves throughput (95 vs 190 MB/s on episode JSON)
# for ~10% smaller files, and this thread competes with the trainer for CPU.
ZSTD_LEVEL = 1


def file_monitor_dir(output_dir: str | os.PathLike[str]) -> Path:
    return Path(output_dir) / "monitors" / "file"


class FileMonitor(Monitor):
    name = "file"

    def __init__(self, config: FileMonitorConfig, *, producer: str, output_dir: Path):
        self.config = config
        self.producer = producer
        self.output_dir = output_dir
        self.dir = file_monitor_dir(output_dir)
        self._metrics_fd: int | None = None
        self._writer: ChunkWriter | None = None
        self._annotations: ChunkWriter | None = None
        self._compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)

    def setup(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._metrics_fd = os.open(
            self.dir / "metrics.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        run_id = os.environ.get(RUN_ID_ENV) or None
        write_link(self.output_dir, "file", {"id": run_id, "url": self.dir.resolve().as_uri()})

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        assert self._metrics_fd is not None
        # The row's own keys win over metrics of the same name.
        row = {**values, "step": step, "time": time.time(), "producer": self.producer}
        os.write(self._metrics_fd, orjson.dumps(row) + b"\n")

    def wants_episodes(self, kind: str, subset: str) -> bool:
        return subset in self.config.subsets

    def log_episodes(self, episodes: list[Any], step: int | None, kind: str, subset: str) -> None:
        writer = self._stream()
        failures: list[BaseException] = []
        for episode in episodes:
            try:
                mapping = self._rounded(episode)
                fields = index_fields(mapping, step)
                frame = _compress(mapping, self._compressor)
            except Exception as exc:  # one bad record must not cost the rest of the call
                failures.append(exc)
                continue
            writer.append(
                frame,
                {
                    "id": fields["id"],
                    "step": fields["step"],
                    "kind": kind,
                    "subset": subset,
                    "env": fields["env"],
                    "reward": fields["reward"],
                    "ok": fields["ok"],
                    "tokens": fields["tokens"],
                    "producer": self.producer,
                    "time": time.time(),
                },
            )
        if failures:
            raise PartialFailure(len(failures), failures[0])

    def wants_annotations(self) -> bool:
        return True

    def log_annotations(self, annotations: list[dict[str, Any]]) -> None:
        writer = self._annotation_stream()
        failures: list[BaseException] = []
        for annotation in annotations:
            try:
                record = round_floats(
                    {"producer": self.producer, **annotation, "time": time.time()},
                    self.config.float_decimals,
                )
                frame = _compress(record, self._compressor)
            except Exception as exc:
                failures.append(exc)
                continue
            writer.append(frame, _annotation_fields(record))
        if failures:
            raise PartialFailure(len(failures), failures[0])

    def finalize(self) -> None:
        try:
            for writer in (self._writer, self._annotations):
                if writer is not None:
                    writer.close()
        finally:
            if self._metrics_fd is not None:
                os.close(self._metrics_fd)
                self._metrics_fd = None

    def _rounded(self, episode: Any) -> Any:
        decimals = self.config.float_decimals
        if decimals is None:
            return to_mapping(episode)
        to_record = getattr(episode, "to_record", None)
        # verifiers' Episode.to_record(float_decimals=) rounds its own streams.
        if (
            not isinstance(episode, Mapping)
            and callable(to_record)
            and "float_decimals" in inspect.signature(to_record).parameters
        ):
            return to_record(float_decimals=decimals)
        return round_floats(to_mapping(episode), decimals)

    def _annotation_stream(self) -> ChunkWriter:
        # One stream per producer, so the trainer and the orchestrator never share a writer.
        if self._annotations is None:
            writer = ChunkWriter(
                self.dir / "annotations" / self.producer,
                self.dir / "annotations" / f"{self.producer}.index.jsonl",
                self.config.chunk_bytes,
                reindex=lambda line: _annotation_fields(orjson.loads(line)),
            )
            writer.open()
            self._annotations = writer
        return self._annotations

    def _stream(self) -> ChunkWriter:
        # Opened on the first episode, so a producer that only logs metrics (a trainer) never
        # takes the stream's lock from the one that logs episodes.
        if self._writer is None:
            writer = ChunkWriter(
                self.dir / "episodes",
                self.dir / "episodes.index.jsonl",
                self.config.chunk_bytes,
                reindex=_reindex,
            )
            writer.open()
            self._writer = writer
        return self._writer


def _compress(record: Any, compressor: zstandard.ZstdCompressor) -> list[bytes]:
    """One zstd frame of the record's NDJSON line, as parts to write in order."""
    cobj = compressor.compressobj()
    parts = [chunk for piece in iter_pieces(record) if (chunk := cobj.compress(piece))]
    parts.append(cobj.flush())
    return parts


def _reindex(line: bytes) -> dict[str, Any]:
    record = orjson.loads(line)
    fields = index_fields(record, None)
    return {k: fields[k] for k in ("id", "step", "env", "reward", "ok", "tokens")}


def _annotation_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "episode_id": record.get("episode_id"),
        "trace_id": record.get("trace_id"),
        "step": record.get("step"),
        "producer": record.get("producer"),
        "time": record.get("time"),
    }


def round_floats(value: Any, decimals: int | None) -> Any:
    """
    `value` with every list of floats (a per-token stream) rounded to `decimals`; what holds no
    such list is returned as is (shared, never copied), and a dict or list holding one is copied
    on the way down. A list is a float stream when its first item is a float, so token ids are
    passed over in one look.
    """
    if decimals is None:
        return value
    if isinstance(value, Mapping):
        out = None
        for key, item in value.items():
            rounded = round_floats(item, decimals)
            if rounded is not item:
                if out is None:
                    out = dict(value)
                out[key] = rounded
        return value if out is None else out
    if isinstance(value, list) and value:
        first = value[0]
        if isinstance(first, float):
            return [round(x, decimals) if isinstance(x, float) else x for x in value]
        if isinstance(first, (Mapping, list)):
            rounded_items = []
            changed = False
            for item in value:
                rounded = round_floats(item, decimals)
                changed |= rounded is not item
                rounded_items.append(rounded)
                yield_gil()
            return rounded_items if changed else value
    return value
