"""The read client's queries across runs (issue 22): runs(filter=, sort=) and runs_frame."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

from openruns import BadRequestError
from openruns.api import Client
from openruns.server import serve_in_thread

from ..server.helpers import api, create_run, metric_rows, upload


@pytest.fixture(scope="module")
def server(backend, stores_factory, tmp_path_factory):
    """Six runs of a sweep: lr 1e-(6 - i), reward i / 10 in the summary, a loss metric whose
    latest value is 1 / (i + 1); run 5 logs no metric."""
    stores = stores_factory.new(backend, tmp_path_factory.mktemp("queries-server"))
    handle = serve_in_thread(**stores.settings)
    project = f"sweep-{uuid.uuid4().hex[:6]}"
    ids = []
    with api(handle.url) as http:
        for i in range(6):
            config = {"format": "toml", "text": f"lr = 1e-{6 - i}\n[model]\nlayers = {i}\n"}
            run = create_run(http, name=f"sweep-{i}", project=project, config=config)
            http.patch(f"/runs/{run['id']}", json={"summary": {"reward": i / 10}})
            if i < 5:
                rows = metric_rows(range(4), loss=lambda s, i=i: 1 / (i + 1) + (3 - s))
                assert upload(http, run["id"], "metrics", rows).status_code == 200
            ids.append(run["id"])
    yield handle, project, ids
    handle.stop()


@pytest.fixture
def client(server):
    with Client(base_url=server[0].url) as c:
        yield c


def test_runs_filter_and_sort(server, client):
    _, project, ids = server
    found = client.runs(project=project, filter="config.lr <= 1e-4 and summary.reward > 0")
    assert [r["id"] for r in found] == [ids[2], ids[1]]
    by_loss = client.runs(project=project, sort="-metric:loss", limit=3)
    assert [r["id"] for r in by_loss] == ids[:3]  # the highest latest loss first
    everything = client.runs(project=project, sort="summary.reward")
    assert [r["id"] for r in everything] == ids


def test_runs_frame(server, client):
    _, project, ids = server
    frame = client.runs_frame(
        ["config.lr", "config.model.layers", "summary.reward", "metric:loss"],
        project=project,
        filter="config.model.layers >= 3",
        sort="-summary.reward",
    )
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == [
        "id",
        "name",
        "status",
        "config.lr",
        "config.model.layers",
        "summary.reward",
        "metric:loss",
    ]
    assert list(frame["id"]) == [ids[5], ids[4], ids[3]]
    assert list(frame["config.model.layers"]) == [5, 4, 3]
    assert frame["summary.reward"].tolist() == [0.5, 0.4, 0.3]
    losses = frame["metric:loss"].tolist()
    assert pd.isna(losses[0]) and losses[1:] == [1 / 5, 1 / 4]


def test_a_bad_expression_raises_naming_it(client):
    with pytest.raises(BadRequestError, match="position 12, found the end"):
        list(client.runs(filter="config.lr <"))
    with pytest.raises(BadRequestError, match="not a field"):
        client.runs_frame(["config.lr", "nope"])
