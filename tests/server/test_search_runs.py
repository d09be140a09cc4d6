"""Full-text search over the episodes of many runs (issue 22): GET /search, both stores."""

from __future__ import annotations

import time
import uuid

import pytest

from openruns.api import Client
from openruns.server.routes import search_runs

from .. import patience
from .helpers import create_run, error_of, ndjson, upload
from .test_rollouts import chat


@pytest.fixture(scope="module")
def sweep(shared_server):
    """Three runs of a project (a, b in group g; c with lr 1e-3), four episodes each that say
    "sandbox" and one that does not, and a run of another project that says it too."""
    from .helpers import api

    project = f"search-{uuid.uuid4().hex[:6]}"
    with api(shared_server.url) as client:
        runs = {}
        for name, group, lr in (("a", "g", 1e-5), ("b", "g", 1e-4), ("c", None, 1e-3)):
            config = {"format": "json", "text": f'{{"lr": {lr}}}'}
            runs[name] = create_run(
                client, name=f"run-{name}", project=project, group=group, config=config
            )
        other = create_run(client, name="elsewhere", project=project + "-other")
        for name, run in [*runs.items(), ("other", other)]:
            records = [chat(i, step=i, reward=1.0, text=f"{name} sandbox {i}") for i in range(4)]
            records.append(chat(9, step=9, reward=0.0, text="nothing to see"))
            assert upload(client, run["id"], "episodes", ndjson(records)).status_code == 200
        deadline = time.monotonic() + patience.SETTLE
        while client.get("/search", params={"q": "x", "project": project}).json()["pending"]:
            assert time.monotonic() < deadline, "the search index did not catch up"
            time.sleep(0.1)
    return project, runs, other


def hits(client, **params) -> list[tuple[str, str]]:
    """(run name, episode id) of every hit, across pages."""
    out, cursor = [], None
    while True:
        body = client.get("/search", params={**params, **({"cursor": cursor} if cursor else {})})
        assert body.status_code == 200, body.text
        page = body.json()
        out += [(hit["run"]["name"], hit["id"]) for hit in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out


def test_search_across_a_project_names_each_hit_s_run(client, sweep):
    project, runs, _ = sweep
    found = hits(client, q="sandbox", project=project, limit=5)
    assert sorted(found) == sorted((f"run-{n}", f"ep-{i}") for n in "abc" for i in range(4))
    assert len(set(found)) == 12  # pages of 5: none repeated
    page = client.get("/search", params={"q": "sandbox", "project": project}).json()
    assert page["runs"] == 3 and page["pending"] == 0
    first = page["items"][0]
    assert first["run"] == {"id": runs["c"]["id"], "name": "run-c"}  # newest first
    assert first["snippets"] and "sandbox" in first["snippets"][0]["text"]


def test_search_across_a_group_or_a_filter(client, sweep):
    project, _, _ = sweep
    by_group = {name for name, _ in hits(client, q="sandbox", project=project, group="g")}
    assert by_group == {"run-a", "run-b"}
    by_filter = hits(client, q="sandbox 2", project=project, filter="config.lr >= 1e-4")
    assert sorted(by_filter) == [("run-b", "ep-2"), ("run-c", "ep-2")]
    assert hits(client, q="sandbox", project=project, filter="config.lr > 1") == []


def test_cross_run_search_is_bounded_and_bad_input_is_400(client, sweep, monkeypatch):
    project, _, _ = sweep
    monkeypatch.setattr(search_runs, "MAX_SEARCH_RUNS", 2)
    status, code, message = error_of(client.get("/search", params={"q": "x", "project": project}))
    assert (status, code) == (400, "too_many_runs") and "more than 2 runs" in message
    monkeypatch.undo()
    response = client.get("/search", params={"q": "x", "filter": "config.lr <"})
    assert error_of(response)[:2] == (400, "invalid_filter")
    assert error_of(client.get("/search", params={"q": "!!"}))[:2] == (400, "invalid_query")
    assert client.get("/search", params={"q": "x", "limit": 101}).status_code == 422


def test_the_read_client_searches_runs(shared_server, sweep):
    project, _, _ = sweep
    with Client(base_url=shared_server.url) as reader:
        found = list(reader.search_runs("sandbox 3", project=project))
    assert sorted((hit["run"]["name"], hit["id"]) for hit in found) == [
        ("run-a", "ep-3"),
        ("run-b", "ep-3"),
        ("run-c", "ep-3"),
    ]
