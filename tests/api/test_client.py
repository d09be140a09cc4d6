"""openruns.api.Client against a real server on loopback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from openruns import ConfigurationError, NotFoundError, UnauthorizedError
from openruns.api import Client
from openruns.server import serve_in_thread

from .. import patience
from ..server.helpers import api, create_run, episode, metric_rows, ndjson, upload


@pytest.fixture(scope="module")
def server(backend, stores_factory, tmp_path_factory):
    stores = stores_factory.new(backend, tmp_path_factory.mktemp("api-server"))
    handle = serve_in_thread(**stores.settings)
    with api(handle.url) as http:
        runs = [create_run(http, name=f"api-{i}", tags=["api"]) for i in range(5)]
        rid = runs[-1]["id"]
        upload(http, rid, "metrics", metric_rows(range(100), loss=lambda s: 1.0 / (s + 1)))
        upload(http, rid, "metrics", metric_rows(range(0, 100, 10), acc=lambda s: s / 100))
        records = [episode(i, step=i % 3, reward=float(i)) for i in range(700)]
        upload(http, rid, "episodes", ndjson(records))
    yield handle, runs, records
    handle.stop()


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.setenv("OPENRUNS_BASE_URL", server[0].url)
    with Client() as c:
        yield c


def test_runs_and_run(server, client):
    _, runs, _ = server
    listed = list(client.runs(tag="api"))
    assert [r["id"] for r in listed] == [r["id"] for r in reversed(runs)]
    assert [r["id"] for r in client.runs(tag="api", limit=2)] == [runs[-1]["id"], runs[-2]["id"]]
    assert [r["name"] for r in client.runs(name="API-3")] == ["api-3"]
    assert client.run(runs[0]["id"])["name"] == "api-0"
    with pytest.raises(NotFoundError):
        client.run("missing")


def test_metrics_rows_and_frames(server, client, monkeypatch):
    rid = server[1][-1]["id"]
    rows = client.metrics(rid)
    assert rows[:2] == [
        {"step": 0, "key": "acc", "value": 0.0, "ts": None},
        {"step": 10, "key": "acc", "value": 0.1, "ts": None},
    ]
    assert len(rows) == 110
    assert [r["step"] for r in client.metrics(rid, keys="loss")] == list(range(100))
    downsampled = client.metrics(rid, keys=["loss"], max_points=10)
    assert len(downsampled) <= 10 and downsampled[-1]["step"] == 99
    frame = client.metrics_frame(rid, keys=["loss", "acc"])
    assert list(frame.columns) == ["step", "key", "value", "ts"] and len(frame) == 110
    wide = frame.pivot(index="step", columns="key", values="value")
    assert wide.loc[10, "acc"] == 0.1 and wide.loc[10, "loss"] == 1 / 11
    monkeypatch.setitem(sys.modules, "polars", None)  # as if polars were not installed
    with pytest.raises(ConfigurationError, match="pip install polars"):
        client.metrics_frame(rid, frame="polars")


def test_many_keys_are_read_in_pages_and_groups(server, client):
    """A run of 5,200 keys: metric_keys follows the key pages, metrics() reads the series of
    every key in groups the server accepts (500 keys a request)."""
    with api(server[0].url) as http:
        rid = create_run(http)["id"]
        values = {f"k/{i:04d}": float(i) for i in range(5200)}
        upload(http, rid, "metrics", metric_rows([0], **values) + metric_rows([1], **values))
    keys = client.metric_keys(rid)
    assert [k["key"] for k in keys] == sorted(values) and keys[-1]["last_step"] == 1
    assert [k["key"] for k in client.metric_keys(rid, q="K/519")] == [
        f"k/519{i}" for i in range(10)
    ]
    assert len(client.metric_keys(rid, prefix="k/00")) == 100
    rows = client.metrics(rid)
    assert len(rows) == 10_400 and {r["key"] for r in rows} == set(values)
    assert [r["value"] for r in rows if r["key"] == "k/4321"] == [4321.0, 4321.0]


def test_steps_are_read_a_page_at_a_time(server, client, monkeypatch):
    _, runs, records = server
    monkeypatch.setattr("openruns.api._client.MAX_STEPS_PAGE", 2)
    steps = client.steps(runs[-1]["id"])
    assert [row["step"] for row in steps] == [0, 1, 2]  # a page of two, then one of one
    assert sum(row["count"] for row in steps) == len(records)


def test_episodes_follow_cursors(server, client):
    _, runs, records = server
    rid = runs[-1]["id"]
    everything = list(client.episodes(rid))
    assert len(everything) == 700  # two pages
    step2 = list(client.episodes(rid, step=2, sort="-reward"))
    expected = sorted(
        (r for r in records if r["run"]["work"]["step"] == 2),
        key=lambda r: -r["traces"][0]["reward"],
    )
    assert [e["id"] for e in step2] == [r["id"] for r in expected]
    assert client.episode(rid, step2[0]["id"]) == expected[0]
    assert list(client.episodes(rid, ok=True)) == []
    assert list(client.episodes(rid, env="code")) == []


def test_settings_and_errors(backend, stores_factory, tmp_path):
    with pytest.raises(ConfigurationError, match="OPENRUNS_BASE_URL"):
        Client()
    locked = serve_in_thread(**stores_factory.new(backend, tmp_path / "locked").settings, auth=True)
    try:
        with (
            Client(base_url=locked.url + "/api/v1/") as anonymous,
            pytest.raises(UnauthorizedError),
        ):
            list(anonymous.runs())
    finally:
        locked.stop()


def test_the_read_client_never_imports_the_server():
    code = (
        "import sys, openruns.api\n"
        "print([m for m in ('openruns.server', 'fastapi', 'sqlalchemy') if m in sys.modules])\n"
    )
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
