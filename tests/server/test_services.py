"""The tests' PostgreSQL databases (tests/services.py): one a test gives back is handed to a
later test only as a fresh copy of the template would be, or not at all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from openruns.server import serve_in_thread

from .. import patience
from ..services import PostgresCluster, StoresFactory
from .helpers import api, create_run, episode, metric_rows, ndjson, upload


def connections(url: str) -> int:
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        name = url.rsplit("/", 1)[1]
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
        return int(conn.execute(query, (name,)).fetchone()[0])


def all_closed(url: str) -> None:
    """Wait for the backends of closed connections: each exits on its own time (seconds on a
    loaded machine), and a database with one left is not handed out."""
    deadline = time.monotonic() + patience.SETTLE
    while connections(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connections(url) == 0


def contents(url: str) -> dict[str, Any]:
    """Every table's row count, the migrations' own rows, each sequence's state."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        return {
            "rows": {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables},
            "meta": conn.execute("SELECT * FROM server_meta ORDER BY 1").fetchall(),
            "versions": conn.execute("SELECT * FROM alembic_version").fetchall(),
            "sequences": conn.execute(
                "SELECT sequencename, last_value FROM pg_sequences ORDER BY 1"
            ).fetchall(),
        }


@pytest.fixture
def cluster(stores_factory: StoresFactory) -> Iterator[PostgresCluster]:
    """The run's cluster, with a pool of given-back databases of this test's alone."""
    own = PostgresCluster.attach(stores_factory.postgres().describe())
    yield own
    own.stop()  # attached: its admin connection only


def test_a_database_given_back_comes_back_as_a_new_copy(cluster, stores_factory):
    url = cluster.new_database()
    fresh = contents(url)
    assert fresh["versions"] and fresh["meta"], "the template holds the migrations' rows"
    server = serve_in_thread(database_url=url, blobs=stores_factory.s3().new_bucket(),
                             s3_endpoint_url=stores_factory.s3().url)  # fmt: skip
    try:
        with api(server.url) as http:
            run = create_run(http, name="used")
            upload(http, run["id"], "metrics", metric_rows(range(50), loss=0.5))
            upload(http, run["id"], "episodes", ndjson([episode(0, step=0, reward=1.0)]))
    finally:
        server.stop()
    used = contents(url)
    written = {t for t, n in used["rows"].items() if n > fresh["rows"][t]}
    assert {"runs", "metric_keys", "segments"} <= written, written
    assert used["sequences"] != fresh["sequences"]

    cluster.give_back(url)
    all_closed(url)
    assert cluster.new_database() == url
    assert contents(url) == fresh


def test_a_database_whose_schema_a_test_changed_is_not_handed_out_again(cluster):
    url = cluster.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE runs ADD COLUMN left_behind integer")
    cluster.give_back(url)
    all_closed(url)  # so that the schema, not a connection, keeps it out
    other = cluster.new_database()
    assert other != url
    with psycopg.connect(other) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
        ).fetchall()
    assert columns and ("left_behind",) not in columns


def test_a_database_still_connected_waits_until_its_connections_close(cluster):
    url = cluster.new_database()
    cluster.give_back(url)
    with psycopg.connect(url):
        assert cluster.new_database() != url  # a server still closing: not this one
    all_closed(url)
    assert cluster.new_database() == url  # given out once nobody holds it
