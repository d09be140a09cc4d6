"""The local sink: batches are appended to the run directory's segments (offline runs)."""

from __future__ import annotations

from pathlib import Path

from ..batches import Batch
from ..rundir import SegmentWriter
from ..upload.stats import Stats

__all__ = ["LocalSink"]


class LocalSink:
    name = "local"

    def __init__(self, run_dir: Path, writer_id: str, stats: Stats):
        self.run_dir = run_dir
        self.writer_id = writer_id
        self.stats = stats
        # One writer per stream; each lane's sink thread touches only its own streams.
        self._writers: dict[str, SegmentWriter] = {}

    def write(self, batch: Batch) -> None:
        writer = self._writers.get(batch.stream)
        if writer is None:
            writer = SegmentWriter(self.run_dir / batch.stream, self.writer_id)
            self._writers[batch.stream] = writer
        writer.append(batch.parts)
        self.stats.count_written(batch.stream, batch.records)

    def closing(self, deadline: float | None) -> None:
        pass  # writes never wait

    def flush(self, streams: tuple[str, ...], deadline: float | None) -> None:
        for stream in streams:
            if stream in self._writers:
                self._writers[stream].sync()

    def close(self, streams: tuple[str, ...], deadline: float | None) -> None:
        for stream in streams:
            if stream in self._writers:
                self._writers[stream].close()

    def drop(self) -> None:
        for writer in self._writers.values():
            writer.drop()
        self._writers = {}
