"""
Several stateless replicas on one PostgreSQL database and one bucket (tests/services.py): a
producer whose requests alternate between them, with replays across them and races of the same
request on both, ends with every record exactly once; killing one replica mid-run loses
nothing; the crash sweep, running on every replica, crashes a silent run once.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from openruns.rundir import batch_key
from openruns.server import serve_in_thread
from openruns.server.store import runs as run_sql

from .. import patience
from .helpers import ServerProcess, api, create_run, upload
from .test_durability import (
    BATCHES,
    check_everything_once,
    check_no_dangling_index_rows,
    make_batches,
)


@pytest.fixture
def shared_stores(stores_factory):
    return stores_factory.new("postgres")


@pytest.fixture
def replicas(shared_stores, tmp_path):
    """Two `openruns server` processes on two ports, sharing the stores."""
    processes = [
        ServerProcess(shared_stores.cli_args(), log=tmp_path / f"replica-{i}.log") for i in range(2)
    ]
    with ThreadPoolExecutor(2) as pool:
        started = list(pool.map(ServerProcess.start, processes))
    yield started
    for replica in started:
        replica.stop()


def race(clients: list[httpx.Client], send) -> list[httpx.Response]:
    """send(client) on every client at the same moment."""
    barrier = threading.Barrier(len(clients))

    def one(client: httpx.Client) -> httpx.Response:
        barrier.wait()
        return send(client)

    with ThreadPoolExecutor(len(clients)) as pool:
        return list(pool.map(one, clients))


@pytest.mark.slow
def test_alternating_replicas_with_replays_store_everything_once(replicas, shared_stores):
    a, b = replicas
    batches = make_batches()
    with api(a.url) as ha, api(b.url) as hb:
        # A create raced on both replicas, with one Idempotency-Key, makes one run.
        body = {"kind": "train", "name": "replicated"}
        made = race(
            [ha, hb], lambda h: h.post("/runs", json=body, headers={"Idempotency-Key": "k"})
        )
        assert sorted(r.status_code for r in made) == [200, 201]
        run_id = made[0].json()["id"]
        assert made[1].json()["id"] == run_id
        assert [r["id"] for r in hb.get("/runs").json()["items"]] == [run_id]
        # The run token one replica signed is good on the other (the secret is in the database).
        with api(b.url, made[0].json()["token"]) as by_token:
            assert by_token.get(f"/runs/{run_id}").status_code == 200

        for i, (kind, data) in enumerate(batches):
            first, second = (ha, hb) if i % 2 == 0 else (hb, ha)
            if i % 3 == 0:  # the same upload on both replicas at once
                answers = race([first, second], lambda h, k=kind, d=data: upload(h, run_id, k, d))
            else:  # sent to one, replayed to the other
                answers = [upload(first, run_id, kind, data), upload(second, run_id, kind, data)]
            assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
            assert answers[0].json() == answers[1].json()
            assert answers[0].json()["receipt"] == batch_key(data)
        check_everything_once(hb, run_id, batches)

        # Finishing is a compare-and-set in the database: the replay on the other replica is a
        # no-op, another status is a conflict, whichever replica is asked.
        finished = ha.post(f"/runs/{run_id}/finish", json={"status": "completed"}).json()
        again = hb.post(f"/runs/{run_id}/finish", json={"status": "completed"})
        assert again.status_code == 200 and again.json()["finished_at"] == finished["finished_at"]
        assert hb.post(f"/runs/{run_id}/finish", json={"status": "failed"}).status_code == 409
    check_no_dangling_index_rows(shared_stores)


def test_killing_one_replica_mid_run_loses_nothing(replicas, shared_stores):
    a, b = replicas
    batches = make_batches()
    with api(a.url) as http:
        run_id = create_run(http, id="survivor")["id"]
    answered: dict[int, dict] = {}
    lock = threading.Lock()

    def produce(indexes: range) -> None:
        """Alternate between the replicas; whatever got no answer goes to the other one."""
        with (
            httpx.Client(base_url=a.url + "/api/v1", timeout=5) as ca,
            httpx.Client(base_url=b.url + "/api/v1", timeout=5) as cb,
        ):
            for n, i in enumerate(indexes):
                kind, data = batches[i]
                for client in (ca, cb) if n % 2 == 0 else (cb, ca):
                    try:
                        response = upload(client, run_id, kind, data)
                    except httpx.HTTPError:
                        continue  # the replica is gone: replay on the other
                    if response.status_code == 200:
                        with lock:
                            answered[i] = response.json()
                        break

    producers = [threading.Thread(target=produce, args=(range(k, BATCHES, 2),)) for k in (0, 1)]
    for producer in producers:
        producer.start()
    deadline = time.monotonic() + patience.SETTLE
    while len(answered) < BATCHES // 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    a.kill()
    for producer in producers:
        producer.join(120)
    assert len(answered) >= BATCHES // 3, "the kill should land mid-run"
    assert sorted(answered) == list(range(BATCHES)), "every batch was answered by a replica"
    with api(b.url) as http:
        check_everything_once(http, run_id, batches)
    check_no_dangling_index_rows(shared_stores)


def test_the_crash_sweep_crashes_a_silent_run_once(shared_stores):
    # Four sweeps at the same moment, as four replicas' sweepers might: each silent run is
    # crashed by exactly one of them.
    stores = [shared_stores.open_store() for _ in range(4)]
    try:
        old = time.time() - 1000
        for i in range(40):
            stores[0].db.write_sync(
                run_sql.create_run, "t", {"id": f"silent-{i}", "kind": "eval"}, None, old
            )
        barrier = threading.Barrier(4)

        def sweep(store) -> int:
            barrier.wait()
            return store.db.write_sync(run_sql.crash_stale, time.time(), 10.0)

        with ThreadPoolExecutor(4) as pool:
            counts = list(pool.map(sweep, stores))
        assert sum(counts) == 40, counts
        assert stores[0].db.write_sync(run_sql.crash_stale, time.time(), 10.0) == 0
    finally:
        for store in stores:
            store.close()

    # End to end: two replicas sweeping every 0.5 s; the silent run's crash is recorded once
    # (finished_at and error do not move as the sweeps go on), the beating one stays running.
    replicas = [serve_in_thread(**shared_stores.settings, heartbeat_timeout=2.0) for _ in range(2)]
    try:
        watch_the_sweepers(replicas[0].url, replicas[1].url)
    finally:
        for replica in replicas:
            replica.stop()


def watch_the_sweepers(url_a: str, url_b: str) -> None:
    with api(url_a) as ha, api(url_b) as hb:
        silent = create_run(ha)["id"]
        beating = create_run(hb)["id"]
        crashed = None
        deadline = time.monotonic() + patience.SETTLE
        while crashed is None and time.monotonic() < deadline:
            ha.post(f"/runs/{beating}/heartbeat")
            hb.post(f"/runs/{beating}/heartbeat")
            run = hb.get(f"/runs/{silent}").json()
            crashed = run if run["status"] == "crashed" else None
            time.sleep(0.05)
        assert crashed is not None
        for _ in range(25):  # ~2.5 s: several sweeps on each replica
            ha.post(f"/runs/{beating}/heartbeat")
            time.sleep(0.1)
        for http in (ha, hb):
            later = http.get(f"/runs/{silent}").json()
            assert later["status"] == "crashed"
            assert (later["finished_at"], later["error"], later["updated_at"]) == (
                crashed["finished_at"],
                crashed["error"],
                crashed["updated_at"],
            )
        assert ha.get(f"/runs/{beating}").json()["status"] == "running"


def test_concurrent_patches_on_two_replicas_all_land(shared_stores):
    """Summary merges and tag rewrites racing on two replicas: every key lands, no 5xx."""
    replicas = [serve_in_thread(**shared_stores.settings) for _ in range(2)]
    try:
        clients = [api(r.url) for r in replicas]
        run_id = create_run(clients[0])["id"]

        def patch(i: int) -> int:
            body = {"summary": {f"k{i}": i}} if i % 2 else {"tags": [f"t{i % 3}", "shared"]}
            return clients[i % 2].patch(f"/runs/{run_id}", json=body).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(patch, range(40))) == {200}
        run = clients[1].get(f"/runs/{run_id}").json()
        assert run["summary"] == {f"k{i}": i for i in range(1, 40, 2)}
        assert "shared" in run["tags"] and len(run["tags"]) == 2
        for client in clients:
            client.close()
    finally:
        for replica in replicas:
            replica.stop()
