"""
What a read returns is what was stored, or a clear error (issue 25, rows 1 to 3).

Segments built both ways (the server's frames from NDJSON, the SDK's batch frames kept as sent)
are damaged one byte at a time at offsets all over the blob (frame headers, block headers,
content, the frames' checksums); after each flip, every read of every record, with and without
annotations folded, the previews and the export, answers the stored text or a 410 naming the
segment, never other text and never a 500. A run's segment replaced by another run's of the
same size is not exported as the run's: its records are counted as not matching the index, and
`openruns server check --verify` names it too.
"""

from __future__ import annotations

import io
import random

import orjson
import pyarrow.parquet as pq
import pytest
from sqlalchemy import update

from openruns.batches import BATCH_CONTENT_TYPE
from openruns.cli import main as openruns_main
from openruns.records import record_kind
from openruns.server.store import episodes as episodes_sql
from openruns.server.store import runs as runs_sql
from openruns.server.store.schema import episodes as episodes_table
from openruns.upload.batching import BatchAssembler, FrameCutter
from openruns.upload.encoder import iter_pieces

from .helpers import api, create_run, error_of, ndjson, upload

RECORDS = 10
WORDS = ("sandbox", "timeout", "reward", "answer", "tool", "proof", "lemma", "retry", "x", "42")


def _record(i: int, rng: random.Random, words: int) -> dict:
    text = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(words))
    return {
        "id": f"ep-{i}",
        "env": "math",
        "run": {"work": {"step": i // 4}},
        "messages": [
            {"role": "user", "content": f"task {i}"},
            {"role": "assistant", "content": text},
        ],
        "traces": [{"id": f"t{i}", "reward": i / 10}],
    }


def _batch_body(records: list[dict], frame_bytes: int) -> bytes:
    """One upload body as the SDK's pipeline builds it (frames of `frame_bytes`)."""
    cutter = FrameCutter("episodes", 1 << 30, frame_bytes)
    assembler = BatchAssembler("episodes")
    out = []
    for record in records:
        row = {"id": record["id"], "step": None, "kind": record_kind(record), "env": "math"}
        row.update(reward=None, ok=None, tokens=None, duration=None)
        for work in cutter.add(iter_pieces(record), row):
            out.append(assembler.add(work))
    out.append(assembler.add(cutter.cut()))
    (batch,) = [b for b in out if b is not None]
    return b"".join(batch.parts)


def _store(stores_or_handle):
    return stores_or_handle.server.config.app.state.server


def _rows(handle, run_id: str) -> list[dict]:
    """The run's index rows (id, frames, digest) and its segments' blob keys."""

    def read(conn):
        run = runs_sql.get_run(conn, run_id)
        return episodes_sql.page_for_export(conn, run["seq"], "episodes", 0, 10_000)

    return _store(handle).store.db.read_sync(read)


def _store_run(http, built: str, records: list[dict]) -> str:
    run = create_run(http)["id"]
    if built == "ndjson":
        assert upload(http, run, "episodes", ndjson(records)).status_code == 200
    else:
        body = _batch_body(records, frame_bytes=16 * 1024)
        headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": f"b-{run}"}
        assert http.post(f"/runs/{run}/episodes", content=body, headers=headers).status_code == 200
    return run


def _offsets(rows: list[dict], size: int, rng: random.Random) -> list[int]:
    """Where to flip: the first and last bytes (magic, frame header, checksum) of the first two
    groups of frames and of the last (the groups between are alike: ten of them, flipped
    each, made the batch case 52 flips of 33 reads), and places spread over the rest."""
    spans = sorted({(r["frame_offset"], r["frame_length"]) for r in rows})
    ends = set(spans[:2] + spans[-1:])
    edges = {o for start, n in ends for o in (start, start + 5, start + n - 1, start + n - 4)}
    return sorted(edges | {rng.randrange(size) for _ in range(12)})


def _reads(http, run: str, records: list[dict]):
    """(id, annotations folded, response) for every record, both ways."""
    for record in records:
        for fold in (False, True):
            response = http.get(
                f"/runs/{run}/episodes/{record['id']}", params={"annotations": str(fold).lower()}
            )
            yield record["id"], fold, response


@pytest.mark.slow
@pytest.mark.parametrize("built", ["ndjson", "batch"])
def test_a_flipped_byte_reads_as_the_stored_text_or_410_never_other_text(make_server, built):
    rng = random.Random(25)
    handle = make_server()
    records = [_record(i, rng, 14000 if built == "ndjson" else 1500) for i in range(RECORDS)]
    sent = {r["id"]: orjson.dumps(r) for r in records}
    with api(handle.url) as http:
        run = _store_run(http, built, records)
        notes = [{"episode_id": f"ep-{i}", "step": i, "info": {"advantage": 0.5}} for i in (1, 5)]
        assert upload(http, run, "annotations", ndjson(notes)).status_code == 200
        rows = _rows(handle, run)
        (key,) = {r["blob_key"] for r in rows}
        if built == "ndjson":
            assert len({r["frame_offset"] for r in rows}) >= 2  # the server cut several frames
        folded = {}
        for eid, fold, response in _reads(http, run, records):
            assert response.status_code == 200
            if fold:
                folded[eid] = response.content
            else:
                assert response.content == sent[eid]  # as sent, byte for byte
        previews = http.get(f"/runs/{run}/previews", params={"ids": ",".join(sent)}).json()
        blobs = _store(handle).blobs
        stored = blobs.get(key)
        answers = {200: 0, 410: 0}
        for offset in _offsets(rows, len(stored), rng):
            damaged = bytearray(stored)
            damaged[offset] ^= 0x01 if offset % 2 else 0xFF
            blobs.put_atomic(key, bytes(damaged))
            holding = {
                r["id"]
                for r in rows
                if r["frame_offset"] <= offset < r["frame_offset"] + r["frame_length"]
            }
            for eid, fold, response in _reads(http, run, records):
                answers[response.status_code] = answers.get(response.status_code, 0) + 1
                if response.status_code == 200:
                    assert eid not in holding, (offset, eid)  # its frames changed: never 200
                    assert response.content == (folded[eid] if fold else sent[eid])
                else:
                    status, code, message = error_of(response)
                    assert (status, code) == (410, "damaged_segment") and key in message
            _check_export(http, run, sent, key, holding)
            got = http.get(f"/runs/{run}/previews", params={"ids": ",".join(sent)})
            assert got.status_code == 200
            for eid, preview in got.json().items():
                assert preview in (previews[eid], {}), (offset, eid)
        blobs.put_atomic(key, stored)
    assert set(answers) == {200, 410} and answers[410] > 0


def _check_export(http, run: str, sent: dict[str, bytes], key: str, holding: set[str]) -> None:
    """The export holds exactly the records whose frames are intact, as sent, and counts the
    others against the damaged segment."""
    for params in ({}, {"env": "math"}):
        response = http.get(f"/runs/{run}/export/episodes.ndjson", params=params)
        assert response.status_code == 200
        lines = response.content.splitlines()
        if holding:
            *lines, trailer = lines
            report = orjson.loads(trailer)["_openruns_export"]
            assert report["skipped_records"] == len(holding)
            assert [d["segment"] for d in report["damaged"]] == [key]
        assert lines == [line for eid, line in sent.items() if eid not in holding]


@pytest.mark.slow
def test_reads_of_rows_indexed_before_digests_verify_the_frames_checksums(make_server):
    """Rows of an older server (no frames_digest) are read by decompressing their whole frames,
    which verifies each frame's checksum: still the stored text or a 410."""
    rng = random.Random(12)
    handle = make_server()
    records = [_record(i, rng, 14000) for i in range(RECORDS)]
    sent = {r["id"]: orjson.dumps(r) for r in records}
    with api(handle.url) as http:
        run = _store_run(http, "ndjson", records)
        _store(handle).store.db.write_sync(
            lambda conn: conn.execute(update(episodes_table).values(frames_digest=None))
        )
        rows = _rows(handle, run)
        assert all(r["frames_digest"] is None for r in rows)
        (key,) = {r["blob_key"] for r in rows}
        blobs = _store(handle).blobs
        stored = blobs.get(key)
        refused = 0
        for offset in _offsets(rows, len(stored), rng):
            damaged = bytearray(stored)
            damaged[offset] ^= 0xFF
            blobs.put_atomic(key, bytes(damaged))
            for eid, fold, response in _reads(http, run, records):
                if response.status_code == 200:
                    if not fold:
                        assert response.content == sent[eid], offset
                    else:
                        assert orjson.loads(response.content)["id"] == eid
                else:
                    assert error_of(response)[:2] == (410, "damaged_segment")
                    refused += 1
        blobs.put_atomic(key, stored)
    assert refused > 0


def _same_size_runs(http, handle, other_ids: bool) -> tuple[str, str, str, str]:
    """Two runs of one segment each, the same size: (run, its blob key, other, its key)."""
    runs = []
    for n, name in enumerate(("mine", "other")):
        prefix = "ep" if n == 0 or not other_ids else "xx"
        records = [
            {"id": f"{prefix}-{i}", "env": "math", "reward": 0.25 + n / 2, "text": "ab"[n] * 500}
            for i in range(RECORDS)
        ]
        run = create_run(http, name=name)["id"]
        assert upload(http, run, "episodes", ndjson(records)).status_code == 200
        (key,) = {r["blob_key"] for r in _rows(handle, run)}
        runs += [run, key]
    return runs[0], runs[1], runs[2], runs[3]


@pytest.mark.parametrize("digests", [True, False], ids=["digests", "before-0012"])
def test_a_segment_replaced_by_another_runs_is_not_exported_as_the_runs(
    make_server, new_stores, capsys, digests
):
    stores = new_stores()
    handle = make_server(stores)
    with api(handle.url) as http:
        # Without digests only the id tells the records apart: the other run's ids differ.
        run, key, other, other_key = _same_size_runs(http, handle, other_ids=not digests)
        if not digests:
            _store(handle).store.db.write_sync(
                lambda conn: conn.execute(update(episodes_table).values(frames_digest=None))
            )
        blobs = _store(handle).blobs
        assert len(blobs.get(key)) == len(blobs.get(other_key))  # a size check cannot tell
        blobs.put_atomic(key, blobs.get(other_key))

        status, code, message = error_of(http.get(f"/runs/{run}/episodes/ep-3"))
        assert (status, code) == (410, "damaged_segment") and key in message
        for params in ({}, {"env": "math"}):
            response = http.get(f"/runs/{run}/export/episodes.ndjson", params=params)
            assert response.status_code == 200
            (trailer,) = response.content.splitlines()  # none of the other run's records
            report = orjson.loads(trailer)["_openruns_export"]
            assert report["complete"] is False and report["skipped_records"] == RECORDS
            assert report["damaged"] == [
                {"segment": key, "records": RECORDS, "reason": report["damaged"][0]["reason"]}
            ]
        parquet = http.get(f"/runs/{run}/export/episodes.parquet").content
        assert pq.read_table(io.BytesIO(parquet)).num_rows == 0
        footer = pq.ParquetFile(io.BytesIO(parquet)).metadata.metadata
        assert orjson.loads(footer[b"openruns.export"])["skipped_records"] == RECORDS
        other_export = http.get(f"/runs/{other}/export/episodes.ndjson").content.splitlines()
        assert len(other_export) == RECORDS  # the other run's own export is whole

    status = openruns_main(["server", "check", *stores.cli_args(), "--verify"])
    out, _ = capsys.readouterr()
    if digests:
        assert status == 1
        assert [line.split("\t")[:2] for line in out.splitlines()] == [["damaged", key]]
    else:  # valid frames of the right size: only the readers' id check sees it
        assert status == 0 and out == ""


def test_a_batch_line_that_is_not_an_object_is_not_a_500_when_folded(client):
    """A batch's frames are stored unparsed; a line that is not an object (only a client that
    breaks the format sends one) reads as sent, and folding its annotations is a 422."""
    run = create_run(client)["id"]
    cutter = FrameCutter("episodes", 1 << 30, 4096)
    assembler = BatchAssembler("episodes")
    row = {"id": "odd", "step": None, "kind": None, "env": None, "reward": None}
    row.update(ok=None, tokens=None, duration=None)
    works = [*cutter.add(iter([b"[1, 2, 3]", b"\n"]), row), cutter.cut()]
    (batch,) = [b for b in (assembler.add(w) for w in works) if b is not None]
    headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": "odd"}
    posted = client.post(f"/runs/{run}/episodes", content=b"".join(batch.parts), headers=headers)
    assert posted.status_code == 200
    note = ndjson([{"episode_id": "odd", "info": {"seen": True}}])
    assert upload(client, run, "annotations", note).status_code == 200
    plain = client.get(f"/runs/{run}/episodes/odd", params={"annotations": "false"})
    assert (plain.status_code, plain.content) == (200, b"[1, 2, 3]")
    status, code, message = error_of(client.get(f"/runs/{run}/episodes/odd"))
    assert (status, code) == (422, "unfoldable_record") and "annotations=false" in message
