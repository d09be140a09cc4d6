from __future__ import annotations

import zstandard

from openruns.rundir import SegmentWriter, iter_frames, segment_paths


def _frame(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def test_a_torn_tail_is_ignored_and_complete_frames_read(tmp_path):
    writer = SegmentWriter(tmp_path / "episodes", "w1")
    payloads = [b'{"i":%d}\n' % i * (i + 1) * 1000 for i in range(4)]
    for payload in payloads:
        writer.append(_frame(payload))
    writer.sync()
    (path,) = segment_paths(tmp_path / "episodes")
    assert path.name.endswith(".open")
    raw = path.read_bytes()
    for cut in (1, 5, 20):  # a writer killed in the middle of its last frame
        path.write_bytes(raw[:-cut])
        assert [f.data for f in iter_frames(path)] == payloads[:3]
    path.write_bytes(raw + b"garbage")
    assert [f.data for f in iter_frames(path)] == payloads


def test_segments_roll_and_seal(tmp_path):
    writer = SegmentWriter(tmp_path / "metrics", "w1", roll_bytes=100)
    for i in range(5):
        writer.append(_frame(bytes(range(256)) * (i + 1)))
    writer.close()
    paths = segment_paths(tmp_path / "metrics")
    assert len(paths) == 5 and all(p.name.endswith(".ndjson.zst") for p in paths)
    frames = [f for p in paths for f in iter_frames(p)]
    assert [len(f.data) for f in frames] == [256 * (i + 1) for i in range(5)]
    assert frames[0].key.startswith("sha256:") and len(frames[0].key) == 71
