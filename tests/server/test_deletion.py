"""
Deleting a run (issue 22) on a real server, on both stores: every row and blob it owns goes
(the bucket listed, the database read), other runs keep theirs, its id is not reused by
accident, only the team's key deletes, an upload or a read racing the deletion gets its data
or a 404/410 (never a 500), and a purge a crash interrupted is taken up again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson
from sqlalchemy import func, select, text

from openruns.server import serve_in_thread
from openruns.server.store import deletion, search
from openruns.server.store import runs as runs_sql
from openruns.server.store.schema import (
    annotations_table,
    episodes,
    log_lines,
    log_totals,
    metric_blocks,
    metric_keys,
    metric_points,
    metric_time_points,
    receipts,
    run_deletions,
    run_tags,
    runs,
    segments,
)

from .. import patience
from .helpers import api, create_run, episode, error_of, ndjson, upload
from .test_rollouts import wait_indexed


def fill(http: httpx.Client, run_id: str, steps: int = 4) -> None:
    """Metrics by step and by time, episodes in `steps` segments, annotations, console lines."""
    rows = [{"step": s, "ts": 1.0e9 + s, "values": {"loss": 1.0 / (s + 1)}} for s in range(300)]
    rows += [{"step": None, "ts": 1.0e9 + t, "values": {"gpu": 0.5}} for t in range(20)]
    assert upload(http, run_id, "metrics", ndjson(rows)).status_code == 200
    for step in range(steps):
        batch = ndjson([episode(i, step, i / 4, prompt=f"sandbox {run_id}") for i in range(5)])
        assert upload(http, run_id, "episodes", batch).status_code == 200
    notes = ndjson([{"episode_id": "ep-0-0", "step": 3, "advantage": 0.5}])
    assert upload(http, run_id, "annotations", notes).status_code == 200
    lines = ndjson([{"ts": 1.0e9 + i, "stream": "stdout", "line": f"l{i}"} for i in range(9)])
    assert upload(http, run_id, "logs", lines).status_code == 200


def seq_of(stores, run_id: str) -> int:
    store = stores.open_store()
    try:
        run = store.db.read_sync(runs_sql.get_run, run_id, None)
        return int(run["seq"])
    finally:
        store.close()


def rows_left(stores, seq: int) -> dict[str, int]:
    """Rows of every table that still name run `seq`."""

    def read(conn) -> dict[str, int]:
        keys = select(metric_keys.c.id).where(metric_keys.c.run_seq == seq)
        counts = {
            table.name: conn.execute(
                select(func.count()).select_from(table).where(table.c.run_seq == seq)
            ).scalar_one()
            for table in (
                run_tags,
                metric_keys,
                episodes,
                segments,
                annotations_table,
                log_lines,
                log_totals,
                receipts,
            )
        }
        counts["runs"] = conn.execute(
            select(func.count()).select_from(runs).where(runs.c.seq == seq)
        ).scalar_one()
        for table in (metric_points, metric_blocks, metric_time_points):
            counts[table.name] = conn.execute(
                select(func.count()).select_from(table).where(table.c.key_id.in_(keys))
            ).scalar_one()
        if conn.dialect.name == "postgresql":
            counts["episode_search"] = conn.execute(
                text("SELECT count(*) FROM episode_search WHERE run_seq = :s"), {"s": seq}
            ).scalar_one()
        return counts

    store = stores.open_store()
    try:
        return store.db.read_sync(read)
    finally:
        store.close()


def blob_keys(stores) -> list[str]:
    """Every blob of the deployment (the folder, or the bucket listed)."""
    return sorted(info.key for info in stores.open_blobs().list_blobs())


def test_delete_removes_every_row_and_blob_of_the_run_and_nothing_else(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        gone = create_run(http, tags=["x"])["id"]
        kept = create_run(http)["id"]
        fill(http, gone)
        fill(http, kept, steps=2)
        wait_indexed(http, gone)
        wait_indexed(http, kept)
        seq, kept_seq = seq_of(stores, gone), seq_of(stores, kept)
        assert any(k.startswith(f"runs/{seq}/") for k in blob_keys(stores))
        before = rows_left(stores, seq)
        assert all(before[t] for t in ("metric_points", "episodes", "log_lines", "receipts"))

        answer = http.delete(f"/runs/{gone}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["id"] == gone and body["purged"] is True
        removed = body["removed"]
        assert removed["episodes"] == 20 and removed["metric_points"] == 300
        assert removed["metric_time_points"] == 20 and removed["log_lines"] == 9
        assert removed["segments"] == 4 and removed["blobs"] == 4 and removed["blob_bytes"] > 0

        assert set(rows_left(stores, seq).values()) == {0}
        assert not [k for k in blob_keys(stores) if k.startswith(f"runs/{seq}/")]
        assert [k for k in blob_keys(stores) if k.startswith(f"runs/{kept_seq}/")]

        status, code, message = error_of(http.get(f"/runs/{gone}"))
        assert (status, code) == (404, "not_found") and gone in message
        assert gone not in [r["id"] for r in http.get("/runs").json()["items"]]
        assert error_of(http.delete(f"/runs/{gone}"))[0] == 404
        # The other run is whole: its metrics, its episodes, their records, its search.
        assert len(http.get(f"/runs/{kept}/metrics", params={"keys": "loss"}).json()) > 0
        assert len(http.get(f"/runs/{kept}/episodes").json()["items"]) == 10
        assert http.get(f"/runs/{kept}/episodes/ep-1-2").status_code == 200
        hits = http.get(f"/runs/{kept}/search", params={"q": "sandbox"}).json()["items"]
        assert len(hits) == 10


def test_a_deleted_id_is_a_409_unless_reuse_is_asked_for(client):
    rid = create_run(client)["id"]
    fill(client, rid, steps=1)
    assert client.delete(f"/runs/{rid}").status_code == 200
    status, code, message = error_of(client.post("/runs", json={"kind": "train", "id": rid}))
    assert (status, code) == (409, "run_deleted")
    assert "was deleted" in message and "reuse_deleted_id" in message
    # A process resuming the id is refused too: nothing recreates it by accident.
    again = client.post("/runs", json={"kind": "train", "id": rid, "resume": True})
    assert error_of(again)[:2] == (409, "run_deleted")

    fresh = client.post("/runs", json={"kind": "eval", "id": rid, "reuse_deleted_id": True})
    assert fresh.status_code == 201, fresh.text
    assert fresh.json()["kind"] == "eval"
    assert client.get(f"/runs/{rid}/episodes").json()["items"] == []
    assert client.get(f"/runs/{rid}/metrics/keys").json() == []
    # The new run is an ordinary run: a create with its id returns it.
    assert client.post("/runs", json={"kind": "eval", "id": rid}).status_code == 200


def test_only_the_teams_key_deletes(teams):
    server, keys, _ = teams
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        made = create_run(red)
        rid = made["id"]
        assert error_of(blue.delete(f"/runs/{rid}"))[0] == 404  # not revealed across teams
        with api(server.url, made["token"]) as own_token:
            status, code, message = error_of(own_token.delete(f"/runs/{rid}"))
            assert (status, code) == (403, "forbidden") and "API key" in message
        assert red.get(f"/runs/{rid}").status_code == 200
        assert red.delete(f"/runs/{rid}").status_code == 200
        assert red.get(f"/runs/{rid}").status_code == 404
        # Another team may use the id: ids and their tombstones are per team.
        assert blue.post("/runs", json={"kind": "train", "id": rid}).status_code == 201


def test_an_upload_to_a_deleted_run_stores_nothing(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        made = create_run(http)
        rid = made["id"]
        assert http.delete(f"/runs/{rid}").status_code == 200
        with api(server.url, made["token"]) as writer:
            for kind, body in (
                ("metrics", ndjson([{"step": 1, "ts": 1.0e9, "values": {"a": 1.0}}])),
                ("episodes", ndjson([episode(0, 1, 1.0)])),
            ):
                assert upload(writer, rid, kind, body).status_code == 404
    seq = seq_of_deleted(stores, rid)
    assert set(rows_left(stores, seq).values()) == {0}


def seq_of_deleted(stores, run_id: str) -> int:
    store = stores.open_store()
    try:
        tomb = store.db.read_sync(deletion.tombstone, "default", run_id)
        return int(tomb["run_seq"])
    finally:
        store.close()


def test_a_reader_streaming_an_export_gets_its_data_or_an_honest_end(make_server, new_stores):
    """An export in flight when its run is deleted ends well-formed: every line it sent is a
    whole record, and it ends complete, or with the marker naming what it could not read."""
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = create_run(http)["id"]
        for step in range(40):
            batch = ndjson([episode(i, step, 0.5, pad="x" * 20_000) for i in range(25)])
            assert upload(http, rid, "episodes", batch).status_code == 200
    started = threading.Event()
    outcome: dict[str, Any] = {}

    def read() -> None:
        url = f"{server.url}/api/v1/runs/{rid}/export/episodes.ndjson"
        with httpx.stream("GET", url, timeout=patience.SETTLE) as response:
            outcome["status"] = response.status_code
            lines = []
            for line in response.iter_lines():
                lines.append(line)
                if len(lines) == 10:
                    started.set()
                    time.sleep(0.5)  # a slow reader: the deletion happens meanwhile
            outcome["lines"] = lines
        started.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(patience.SETTLE)
    with api(server.url) as http:
        assert http.delete(f"/runs/{rid}").status_code == 200
    reader.join(patience.SETTLE)
    assert outcome["status"] in (200, 404, 410)
    records = [orjson.loads(line) for line in outcome.get("lines", []) if line]
    body = [r for r in records if "_openruns_export" not in r]
    assert len(body) >= 10 and all(r["id"].startswith("ep-") for r in body)
    if len(body) < 1000:  # cut short by the deletion: the last line says so
        assert records[-1]["_openruns_export"]["complete"] is False


def test_an_interrupted_purge_is_taken_up_again(make_server, new_stores):
    """A server that stopped mid-purge (here: the run only marked deleted, long ago) leaves it
    to the next server's periodic purge."""
    stores = new_stores()
    first = make_server(stores)
    with api(first.url) as http:
        rid = create_run(http)["id"]
        fill(http, rid, steps=2)
    first.stop()
    seq = seq_of(stores, rid)
    store = stores.open_store()
    try:
        store.db.write_sync(deletion.mark_deleted, seq, None, time.time() - 3600)
    finally:
        store.close()
    assert rows_left(stores, seq)["episodes"] == 10  # nothing purged yet

    make_server(stores)
    deadline = time.monotonic() + patience.SETTLE
    while time.monotonic() < deadline and purged_at(stores, seq) is None:
        time.sleep(0.1)
    assert purged_at(stores, seq) is not None
    left = rows_left(stores, seq)
    assert not {table: n for table, n in left.items() if n}, left
    assert not [k for k in blob_keys(stores) if k.startswith(f"runs/{seq}/")]


def test_an_indexer_racing_a_purge_leaves_no_search_entries(stores_factory, tmp_path):
    """PostgreSQL, two writers: an indexer that found a run's episodes still there, and has
    not committed their search entries when the purge deletes the episodes, must not leave
    those entries behind the purge (both stages of search entries had run, in one slice)."""
    stores = stores_factory.new("postgres", tmp_path / "data")
    server = serve_in_thread(**stores.settings)
    try:
        with api(server.url) as http:
            rid = create_run(http)["id"]
            fill(http, rid, steps=2)
    finally:
        server.stop()
    seq = seq_of(stores, rid)
    store = stores.open_store()
    try:

        def unindexed(conn) -> list[search.Document]:
            conn.execute(text("DELETE FROM episode_search WHERE run_seq = :s"), {"s": seq})
            rows = conn.execute(
                select(episodes.c.seq, episodes.c.stream).where(episodes.c.run_seq == seq)
            )
            return [(row.seq, seq, row.stream, None, "sandbox words") for row in rows]

        docs = store.db.write_sync(unindexed)
        assert len(docs) == 10
        store.db.write_sync(deletion.mark_deleted, seq, None, time.time())
        with store.db.writer.connect() as indexer, indexer.begin():
            newest = max(doc[0] for doc in docs)
            assert search.add_documents(indexer, search.indexed_seq(indexer), newest, docs)
            purge = threading.Thread(target=purge_rows, args=(store, seq))
            purge.start()
            # The indexer commits only once the purge is done or waits on a lock.
            deadline = time.monotonic() + patience.SETTLE
            while purge.is_alive() and time.monotonic() < deadline:
                if store.db.read_sync(waiting_on_locks):
                    break
                time.sleep(0.05)
        purge.join(patience.SETTLE)
        assert not purge.is_alive()
    finally:
        store.close()
    assert rows_left(stores, seq)["episode_search"] == 0


def purge_rows(store, seq: int) -> None:
    stage = 0
    while stage < len(deletion.STAGES):
        stage, _ = store.db.write_sync(deletion.purge_step, seq, stage, 1000, time.time())


def waiting_on_locks(conn) -> int:
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    return conn.execute(text(query)).scalar_one()


def purged_at(stores, seq: int) -> float | None:
    store = stores.open_store()
    try:
        return store.db.read_sync(
            lambda conn: conn.execute(
                select(run_deletions.c.purged_at).where(run_deletions.c.run_seq == seq)
            ).scalar_one()
        )
    finally:
        store.close()


def test_a_deleted_runs_numbers_are_never_handed_out_again(make_server, new_stores):
    """Deleting the newest run must not give its seq (blob folder, search scope) nor its
    episodes' seqs to the next run: the search indexer, past those seqs, would skip them."""
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        create_run(http)
        newest = create_run(http)["id"]
        fill(http, newest, steps=2)
        wait_indexed(http, newest)
        old_seq = seq_of(stores, newest)
        assert http.delete(f"/runs/{newest}").status_code == 200

        after = create_run(http)["id"]
        assert seq_of(stores, after) > old_seq
        batch = ndjson([episode(i, 0, 1.0, prompt="quokka") for i in range(3)])
        assert upload(http, after, "episodes", batch).status_code == 200
        wait_indexed(http, after)
        hits = http.get(f"/runs/{after}/search", params={"q": "quokka"}).json()["items"]
        assert sorted(h["id"] for h in hits) == ["ep-0-0", "ep-0-1", "ep-0-2"]


def test_a_prime_evaluation_goes_with_its_sample_objects(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        env = http.post("/environmentshub/resolve", json={"name": "gsm8k"}).json()["data"]["id"]
        made = http.post("/evaluations/", json={"name": "e", "environments": [{"id": env}]})
        rid = made.json()["evaluation_id"]
        row = {"sample_id": "s1", "info": {"native_wrapper": {"id": "ep-1", "traces": []}}}
        pushed = http.post(f"/evaluations/{rid}/samples", json={"samples": [row]})
        assert pushed.status_code == 200, pushed.text
        seq = seq_of(stores, rid)
        assert [k for k in blob_keys(stores) if k.startswith(f"runs/{seq}/prime/")]

        removed = http.delete(f"/runs/{rid}").json()["removed"]
        assert removed["prime_objects"] == 1
        assert not [k for k in blob_keys(stores) if k.startswith(f"runs/{seq}/")]
        assert http.get(f"/runs/{rid}/prime/eval-samples").status_code == 404
