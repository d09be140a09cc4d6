"""The run directory's format: batches in segments, torn tails, the spool and its acks."""

from __future__ import annotations

import os

import orjson
import zstandard

from openruns.batches import Batch, batch_lines, header_frame
from openruns.rundir import (
    SegmentWriter,
    Spool,
    acked_keys,
    iter_batches,
    read_batch,
    read_json,
    segment_paths,
    write_json_atomic,
)


def _batch(stream: str, key: str, lines: list[bytes]) -> Batch:
    data = b"".join(lines)
    frame = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)
    header = {"v": 1, "key": key, "stream": stream, "records": len(lines)}
    header["frames"] = [[len(frame), len(data)]]
    return Batch(stream, key, len(lines), [header_frame(header), frame])


def test_a_torn_tail_is_ignored_and_complete_batches_read(tmp_path):
    writer = SegmentWriter(tmp_path / "episodes", "w1")
    batches = [_batch("episodes", f"k{i}", [b'{"i":%d}\n' % i] * (i + 1) * 100) for i in range(4)]
    for batch in batches:
        writer.append(batch.parts)
    writer.sync()
    (path,) = segment_paths(tmp_path / "episodes")
    assert path.name.endswith(".open")
    raw = path.read_bytes()
    for cut in (1, 5, 20):  # a writer killed in the middle of its last batch
        path.write_bytes(raw[:-cut])
        assert [b.key for b in iter_batches(path)] == ["k0", "k1", "k2"]
    path.write_bytes(raw + b"garbage")
    stored = list(iter_batches(path))
    assert [b.records for b in stored] == [100, 200, 300, 400]
    data = read_batch(tmp_path / "episodes", stored[1])
    assert data == b"".join(batches[1].parts)  # on disk, byte for byte, the upload's body
    assert batch_lines(data, stored[1].header_length).count(b"\n") == 200


def test_segments_roll_and_seal(tmp_path):
    writer = SegmentWriter(tmp_path / "metrics", "w1", roll_bytes=1)  # one batch each
    for i in range(5):
        writer.append(_batch("metrics", f"k{i}", [b"{}\n"] * (i + 1)).parts)
    writer.close()
    paths = segment_paths(tmp_path / "metrics")
    assert len(paths) == 5 and all(p.name.endswith(".ndjson.zst") for p in paths)
    assert [b.records for p in paths for b in iter_batches(p)] == [1, 2, 3, 4, 5]


def test_the_spool_deletes_what_the_server_acknowledged_and_keeps_the_rest(tmp_path):
    spool = Spool(tmp_path, "w1", max_bytes=10**6, roll_bytes=1)  # one batch per segment
    refs = [spool.put(_batch("episodes", f"k{i}", [b"{}\n"] * 10)) for i in range(3)]
    assert all(refs) and len(segment_paths(tmp_path / "episodes")) == 3
    spool.ack(refs[0], "k0")
    spool.ack(refs[2], "k2")
    left = segment_paths(tmp_path / "episodes")
    assert [b.key for p in left for b in iter_batches(p)] == ["k1"]
    assert acked_keys(tmp_path / "episodes") == {"k0", "k2"}
    assert spool.bytes_used == refs[1].length
    spool.ack(refs[1], "k1")
    spool.close(("episodes",))
    assert segment_paths(tmp_path / "episodes") == []
    assert not (tmp_path / "episodes" / "acked.ndjson").exists()  # nothing left to refer to
    assert spool.bytes_used == 0


def test_the_spool_refuses_what_does_not_fit(tmp_path):
    batch = _batch("metrics", "k", [orjson.dumps({"x": "y" * 100}) + b"\n"])
    spool = Spool(tmp_path, "w1", max_bytes=2 * batch.nbytes)
    assert spool.put(batch) and spool.put(batch)
    assert spool.put(batch) is None
    spool.close(("metrics",))
    assert spool.bytes_used == 2 * batch.nbytes  # unacknowledged: kept for openruns sync


def test_a_json_file_is_written_when_another_process_removes_its_folder_meanwhile(
    tmp_path, monkeypatch
):
    # Two processes attached to one run share its directory: the one that finishes first
    # removes it, emptied (remove_delivered), between the other's mkdir and its write.
    run_dir = tmp_path / "run"
    real_open = os.open
    removed = []

    def open_after_the_other_cleaned_up(path, *args, **kwargs):
        if not removed:
            removed.append(path)
            run_dir.rmdir()
        return real_open(path, *args, **kwargs)

    run_dir.mkdir()
    monkeypatch.setattr(os, "open", open_after_the_other_cleaned_up)
    write_json_atomic(run_dir / "run.json", {"status": "failed"})
    monkeypatch.undo()
    assert removed and read_json(run_dir / "run.json") == {"status": "failed"}
    assert [p.name for p in run_dir.iterdir()] == ["run.json"]
