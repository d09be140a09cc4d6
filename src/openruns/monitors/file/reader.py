"""
Reading what the file monitor wrote, while it writes or after it crashed.

    reader = FileMonitorReader("outputs")            # or "outputs/monitors/file"
    reader.metrics()                                 # every metrics row
    rows = reader.index()                            # one row per episode, arrival order
    episode = reader.read(rows[-1])                  # one seek, one frame decompressed
    for episode in reader.episodes(): ...            # the whole stream, from the chunks
    reader.annotations()                             # {producer: [annotation, ...]}

A torn last line or frame (a writer killed mid-write) ends what is read; nothing before it is
lost. From a shell: `zstd -dc outputs/monitors/file/episodes/*.zst | jq .id`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import zstandard

from .chunks import OPEN_SUFFIX, SEALED_SUFFIX, chunk_numbers, decompress_frame, read_index_rows

__all__ = ["FileMonitorReader"]


class FileMonitorReader:
    def __init__(self, path: str | os.PathLike[str]):
        path = Path(path)
        nested = path / "monitors" / "file"
        self.dir = nested if nested.is_dir() else path
        self.stream_dir = self.dir / "episodes"

    def metrics(self) -> list[dict[str, Any]]:
        """Rows of metrics.jsonl, in write order (a torn last row is left out)."""
        rows, _ = read_index_rows(self.dir / "metrics.jsonl")
        return rows

    def index(self) -> list[dict[str, Any]]:
        """Index rows: line, chunk, offset, size, id, step, kind, subset, env, reward, ok, ..."""
        rows, _ = read_index_rows(self.dir / "episodes.index.jsonl")
        return rows

    def read(self, row: dict[str, Any]) -> dict[str, Any]:
        """The episode an index row points at."""
        number = row["chunk"]
        # A chunk may be sealed (renamed) between two looks: try both names, sealed last.
        for name in (f"{number:05d}{SEALED_SUFFIX}", f"{number:05d}{OPEN_SUFFIX}") * 2:
            try:
                with (self.stream_dir / name).open("rb") as fh:
                    fh.seek(row["offset"])
                    frame = fh.read(row["size"])
                break
            except FileNotFoundError:
                continue
        else:
            raise FileNotFoundError(f"chunk {number} of {self.stream_dir} is not on disk")
        record: dict[str, Any] = orjson.loads(decompress_frame(zstandard.ZstdDecompressor(), frame))
        return record

    def episodes(self) -> Iterator[dict[str, Any]]:
        """Every episode in arrival order, read from the chunks (the index is not needed)."""
        for line in self.lines():
            yield orjson.loads(line)

    def annotations(self) -> dict[str, list[dict[str, Any]]]:
        """Each producer's annotations, in the order it wrote them."""
        root = self.dir / "annotations"
        if not root.is_dir():
            return {}
        return {
            stream.name: [
                orjson.loads(line)
                for n in chunk_numbers(stream)
                for line in _chunk_lines(stream, n)
            ]  # fmt: skip
            for stream in sorted(p for p in root.iterdir() if p.is_dir())
        }

    def lines(self) -> Iterator[bytes]:
        """Every episode's NDJSON line (newline excluded), streamed chunk by chunk."""
        for number in chunk_numbers(self.stream_dir):
            yield from _chunk_lines(self.stream_dir, number)


def _chunk_lines(stream_dir: Path, number: int) -> Iterator[bytes]:
    fh = None
    for name in (f"{number:05d}{SEALED_SUFFIX}", f"{number:05d}{OPEN_SUFFIX}") * 2:
        try:
            fh = (stream_dir / name).open("rb")
            break
        except FileNotFoundError:
            continue
    if fh is None:
        return
    with fh:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        parts: list[bytes] = []  # the current line's pieces (joined once: lines are MBs)
        while True:
            try:
                block = reader.read(1 << 20)
            except zstandard.ZstdError:
                return  # a torn or corrupt frame: the (unindexed) tail of a killed writer
            if not block:
                return  # a partial line left in `parts` is a frame cut short: not an episode
            *whole, rest = block.split(b"\n")
            for piece in whole:
                parts.append(piece)
                line = b"".join(parts)
                parts = []
                if line:
                    yield line
            if rest:
                parts.append(rest)
