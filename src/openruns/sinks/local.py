"""The local sink: batches become zstd frames in the run directory (offline runs, spools)."""

from __future__ import annotations

from pathlib import Path

import zstandard

from ..rundir import SegmentWriter
from ..upload.encoder import Batch

__all__ = ["LocalSink", "compress_batch"]


def compress_batch(batch: Batch, compressor: zstandard.ZstdCompressor) -> bytes:
    """One zstd frame (content size and checksum included) of the batch's NDJSON."""
    obj = compressor.compressobj(size=batch.size)
    out = [obj.compress(part) for part in batch.parts]
    out.append(obj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))
    return b"".join(out)


class LocalSink:
    name = "local"

    def __init__(self, run_dir: Path, writer_id: str):
        self.run_dir = run_dir
        self.writer_id = writer_id
        self._compressor = zstandard.ZstdCompressor(level=1, write_checksum=True)
        self._writers: dict[str, SegmentWriter] = {}

    def write(self, batch: Batch) -> None:
        frame = compress_batch(batch, self._compressor)
        writer = self._writers.get(batch.stream)
        if writer is None:
            writer = SegmentWriter(self.run_dir / batch.stream, self.writer_id)
            self._writers[batch.stream] = writer
        segment, offset = writer.append(frame)
        for row in batch.index:
            row["segment"] = segment
            row["frame"] = offset
        writer.append_index(batch.index)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.sync()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()

    def drop(self) -> None:
        for writer in self._writers.values():
            writer.drop()
        self._writers = {}
