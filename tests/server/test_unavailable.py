"""
When PostgreSQL or the bucket cannot serve, a request gets 503 + Retry-After and a message
naming which, never a 500; a value PostgreSQL cannot store is a 400; and the server recovers
once the store is back.
"""

from __future__ import annotations

import threading

import pytest

from openruns.server import serve_in_thread

from ..services import S3Endpoint, Stores
from .helpers import api, create_run, episode, error_of, metric_rows, ndjson, upload


@pytest.fixture
def pg_stores(stores_factory) -> Stores:
    return stores_factory.new("postgres")


def test_an_unreachable_database_is_a_503_naming_it(stores_factory, pg_stores):
    cluster = stores_factory.postgres()
    name = pg_stores.settings["database_url"].rsplit("/", 1)[1]
    server = serve_in_thread(**pg_stores.settings, db_pool_timeout=5)
    try:
        with api(server.url) as http:
            rid = create_run(http)["id"]
            cluster._admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            cluster._admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            for response in (
                http.get(f"/runs/{rid}"),
                upload(http, rid, "metrics", metric_rows(range(10), loss=1.0)),
            ):
                status, code, message = error_of(response)
                assert (status, code) == (503, "database_unavailable"), message
                assert response.headers["Retry-After"] == "5"
                assert f"/{name}" in message
            cluster._admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
            assert http.get(f"/runs/{rid}").status_code == 200
    finally:
        server.stop()


def test_an_exhausted_pool_is_a_503(stores_factory, pg_stores):
    """One writer connection, held by an upload waiting on the run's lock: the next write
    waits past the pool timeout and is told to retry."""
    cluster = stores_factory.postgres()
    server = serve_in_thread(**pg_stores.settings, db_pool_size=1, db_pool_timeout=0.3)
    name = pg_stores.settings["database_url"].rsplit("/", 1)[1]
    import psycopg

    try:
        with api(server.url) as http:
            rid = create_run(http)["id"]
            seq = 1  # the first run of a fresh database
            with psycopg.connect(cluster.url(name, driver=False)) as holder:
                holder.execute("SELECT pg_advisory_lock(%s, %s)", (0x6F72, seq))
                stuck: list = []
                blocked = threading.Thread(
                    target=lambda: stuck.append(
                        upload(http, rid, "metrics", metric_rows(range(5), a=1.0))
                    )
                )
                blocked.start()
                # The upload takes the only writer and waits for the lock; a heartbeat behind
                # it waits for a connection, past the pool timeout.
                response = http.post(f"/runs/{rid}/heartbeat")
                while response.status_code == 200 and not stuck:
                    response = http.post(f"/runs/{rid}/heartbeat")
                status, code, message = error_of(response)
                assert (status, code) == (503, "database_pool_exhausted"), message
                assert response.headers["Retry-After"] == "2"
                holder.execute("SELECT pg_advisory_unlock(%s, %s)", (0x6F72, seq))
                blocked.join(30)
            assert stuck and stuck[0].status_code == 200
            assert http.post(f"/runs/{rid}/heartbeat").status_code == 200
    finally:
        server.stop()


def test_an_unreachable_bucket_is_a_503_naming_it(pg_stores):
    own = S3Endpoint().start()  # this test stops it
    try:
        bucket = own.new_bucket()
        settings = {**pg_stores.settings, "blobs": bucket, "s3_endpoint_url": own.url}
        server = serve_in_thread(**settings)
        try:
            with api(server.url) as http:
                rid = create_run(http)["id"]
                records = ndjson([episode(0, 0, 1.0)])
                assert upload(http, rid, "episodes", records).status_code == 200
                own.stop()
                for response in (
                    http.get(f"/runs/{rid}/episodes/ep-0-0"),
                    upload(http, rid, "episodes", ndjson([episode(1, 0, 1.0)])),
                ):
                    status, code, message = error_of(response)
                    assert (status, code) == (503, "blobs_unavailable"), message
                    assert bucket.removesuffix("/blobs") in message
                    assert response.headers["Retry-After"] == "5"
        finally:
            server.stop()
    finally:
        own.stop()


def test_a_value_postgresql_cannot_store_is_a_400(make_server, backend):
    server = make_server()
    with api(server.url) as http:
        named = http.post("/runs", json={"kind": "eval", "name": "nul\x00name"})
        rid = create_run(http)["id"]
        nul_id = upload(http, rid, "episodes", ndjson([{"id": "a\x00b", "env": "e"}]))
        if backend == "sqlite":
            assert named.status_code == 201 and nul_id.status_code == 200
            return
        for response in (named, nul_id):
            status, code, message = error_of(response)
            assert (status, code) == (400, "invalid_value") and "NUL" in message
        assert list(http.get(f"/runs/{rid}/episodes").json()["items"]) == []
