"""
A 2xx means durable: SIGKILL `openruns server` in the middle of a stream of uploads, restart
it on the same stores (data directory, or PostgreSQL + bucket), replay every batch that got no
2xx (same Idempotency-Key), and every record is there exactly once, with no index row pointing
at a missing or torn segment.
"""

from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest
import zstandard
from sqlalchemy import select

from openruns.rundir import batch_key
from openruns.server.store.schema import episodes, segments

from .. import patience
from .helpers import ServerProcess, api, create_run, episode, metric_rows, ndjson, upload

BATCHES = 60
EPISODES_PER_BATCH = 20


def make_batches() -> list[tuple[str, bytes]]:
    batches = []
    for b in range(BATCHES):
        if b % 2:
            batches.append(("metrics", metric_rows(range(b * 500, (b + 1) * 500), loss=float(b))))
        else:
            records = [
                episode(b * EPISODES_PER_BATCH + i, step=b, reward=float(i), pad="x" * 20_000)
                for i in range(EPISODES_PER_BATCH)
            ]
            batches.append(("episodes", ndjson(records)))
    return batches


@pytest.mark.slow
def test_sigkill_mid_stream_keeps_every_acknowledged_record_once(new_stores, tmp_path):
    stores = new_stores()
    server = ServerProcess(stores.cli_args(), log=tmp_path / "server.log").start()
    batches = make_batches()
    acked: set[int] = set()
    lock = threading.Lock()
    try:
        with api(server.url) as http:
            run_id = create_run(http, id="durable")["id"]

        def send(indexes: range) -> None:
            with httpx.Client(base_url=server.url + "/api/v1", timeout=5) as http:
                for i in indexes:
                    kind, data = batches[i]
                    try:
                        response = upload(http, run_id, kind, data)
                    except httpx.HTTPError:
                        continue  # no answer: not acknowledged
                    if response.status_code == 200:
                        with lock:
                            acked.add(i)

        senders = [threading.Thread(target=send, args=(range(k, BATCHES, 2),)) for k in (0, 1)]
        for sender in senders:
            sender.start()
        deadline = time.monotonic() + patience.SETTLE
        while len(acked) < BATCHES // 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        server.kill()
        for sender in senders:
            sender.join(patience.SETTLE)
        assert BATCHES // 3 <= len(acked) < BATCHES, "the kill should land mid-stream"

        server.start()
        with api(server.url) as http:
            for kind, data in batches:
                response = upload(http, run_id, kind, data)
                assert response.status_code == 200, response.text
                count = "rows" if kind == "metrics" else "records"
                expected = 500 if kind == "metrics" else EPISODES_PER_BATCH
                assert response.json() == {
                    "status": "committed",
                    count: expected,
                    "receipt": batch_key(data),
                }
            check_everything_once(http, run_id, batches)
    finally:
        server.stop()
    check_no_dangling_index_rows(stores)


def check_everything_once(http: httpx.Client, run_id: str, batches) -> None:
    series = http.get(f"/runs/{run_id}/metrics", params={"max_points": 0}).json()["series"]
    expected_steps = [s for b in range(1, BATCHES, 2) for s in range(b * 500, (b + 1) * 500)]
    assert series["loss"]["step"] == expected_steps
    assert series["loss"]["value"] == [float(s // 500) for s in expected_steps]
    rows, cursor = [], None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = http.get(f"/runs/{run_id}/episodes", params=params).json()
        rows += page["items"]
        if not (cursor := page["next_cursor"]):
            break
    originals = {
        record["id"]: line
        for kind, data in batches
        if kind == "episodes"
        for line in data.splitlines()
        for record in [orjson.loads(line)]
    }
    assert sorted(r["id"] for r in rows) == sorted(originals)  # each exactly once
    for episode_id in list(originals)[:: EPISODES_PER_BATCH // 2]:
        assert http.get(f"/runs/{run_id}/episodes/{episode_id}").content == originals[episode_id]
    exported = http.get(f"/runs/{run_id}/export/episodes.ndjson").content.splitlines()
    assert sorted(exported) == sorted(originals.values())


def check_no_dangling_index_rows(stores) -> None:
    """Every index row's frame is in a stored blob and decompresses (checksum verified)."""
    query = select(
        segments.c.blob_key,
        episodes.c.frame_offset,
        episodes.c.frame_length,
        episodes.c.offset,
        episodes.c.length,
    ).join(segments, segments.c.id == episodes.c.segment_id)
    store = stores.open_store()
    try:
        rows = store.db.read_sync(lambda conn: [tuple(r) for r in conn.execute(query)])
    finally:
        store.close()
    assert rows
    blobs = stores.open_blobs()
    decompressor = zstandard.ZstdDecompressor()
    segments_read: dict[str, bytes] = {}  # each blob fetched once (a GET each on S3)
    for blob_key, frame_offset, frame_length, offset, length in rows:
        if blob_key not in segments_read:
            segments_read[blob_key] = blobs.get(blob_key)
        frame = segments_read[blob_key][frame_offset : frame_offset + frame_length]
        assert len(frame) == frame_length
        record = decompressor.decompress(frame)[offset : offset + length]
        assert orjson.loads(record)["id"]
