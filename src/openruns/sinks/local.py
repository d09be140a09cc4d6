"""The local sink: batches become zstd frames in the run directory (offline runs, spools)."""

from __future__ import annotations

from pathlib import Path

import zstandard

from ..rundir import SegmentWriter
from ..upload.encoder import Batch
from ..upload.stats import Stats

__all__ = ["LocalSink", "compress_batch", "new_compressor"]


def new_compressor() -> zstandard.ZstdCompressor:
    return zstandard.ZstdCompressor(level=1, write_checksum=True)


def compress_batch(batch: Batch, compressor: zstandard.ZstdCompressor) -> bytes:
    """One zstd frame (content size and checksum included) of the batch's NDJSON."""
    obj = compressor.compressobj(size=batch.size)
    out = [obj.compress(part) for part in batch.parts]
    out.append(obj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
    return b"".join(out)


class LocalSink:
    name = "local"

    def __init__(self, run_dir: Path, writer_id: str, stats: Stats):
        self.run_dir = run_dir
        self.writer_id = writer_id
        self.stats = stats
        # One writer per stream; each lane's sink thread touches only its own streams.
        self._writers: dict[str, SegmentWriter] = {}
        self._compressors: dict[str, zstandard.ZstdCompressor] = {}

    def write(self, batch: Batch) -> None:
        writer = self._writers.get(batch.stream)
        if writer is None:
            writer = SegmentWriter(self.run_dir / batch.stream, self.writer_id)
            self._writers[batch.stream] = writer
            # A compressor is not thread-safe; a stream is only ever written by one thread.
            self._compressors[batch.stream] = new_compressor()
        frame = compress_batch(batch, self._compressors[batch.stream])
        segment, offset = writer.append(frame)
        for row in batch.index:
            row["segment"] = segment
            row["frame"] = offset
        writer.append_index(batch.index)
        self.stats.count_written(batch.stream, batch.count)

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
