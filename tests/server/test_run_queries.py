"""Queries across runs (issue 22): GET /runs with filter, sort and columns, on both stores."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import insert, select

from openruns.server.store import Store
from openruns.server.store.schema import runs as runs_table

from ..patience import REQUEST
from .helpers import create_run, database_at, error_of, metric_rows, upload

CONFIGS = {
    "a": ("json", {"lr": 1e-6, "optimizer": {"name": "adam", "betas": [0.9, 0.99]}, "seed": 1}),
    "b": ("toml", 'lr = 3e-5\nseed = 2\n[optimizer]\nname = "sgd"\n'),
    "c": ("yaml", "lr: 1.0e-4\nseed: '3'\noptimizer:\n  name: adamw\nwarmup: true\n"),
    "d": ("text", "lr is whatever"),
    "e": ("json", {"lr": "fast", "seed": None}),
}
SUMMARIES = {
    "a": {"reward": 0.9, "best": {"step": 10}},
    "b": {"reward": 0.4},
    "c": {"reward": 0.7, "note": "Good Run"},
    "d": {},
    "e": {"reward": "n/a"},
}
LOSS = {"a": 0.5, "b": 0.1, "c": 0.3}  # latest loss; d and e log none
TAGS = {"a": ["base", "rl"], "b": ["rl"], "c": ["sweep-1"], "d": [], "e": ["base"]}
STATUS = {"a": "completed", "b": "failed", "c": "completed", "d": "running", "e": "crashed"}


@pytest.fixture(scope="module")
def fleet(shared_server) -> dict[str, Any]:
    """Five runs in a project of their own, created a..e (e newest): {"project", "ids"}."""
    project = f"q-{uuid.uuid4().hex[:8]}"
    ids: dict[str, str] = {}
    with httpx.Client(base_url=shared_server.url + "/api/v1", timeout=30) as client:
        for name, (form, config) in CONFIGS.items():
            text = orjson.dumps(config).decode() if form == "json" else config
            run = create_run(
                client,
                name=f"run-{name}" + ("-llama" if name in "ac" else ""),
                project=project,
                tags=TAGS[name],
                config={"format": form, "text": text},
            )
            ids[name] = run["id"]
            if SUMMARIES[name]:
                client.patch(f"/runs/{run['id']}", json={"summary": SUMMARIES[name]})
            if name in LOSS:  # a higher loss earlier, the latest last
                rows = metric_rows(range(3), loss=lambda s, v=LOSS[name]: v + (2 - s))
                assert upload(client, run["id"], "metrics", rows).status_code == 200
            if STATUS[name] != "running":
                finish = {"status": STATUS[name]}
                assert client.post(f"/runs/{run['id']}/finish", json=finish).status_code == 200
    return {"project": project, "ids": ids}


def names(client: httpx.Client, fleet: dict[str, Any], **params: Any) -> list[str]:
    """The runs (a..e) a listing answers, across every page, in order."""
    by_id = {v: k for k, v in fleet["ids"].items()}
    out: list[str] = []
    cursor = None
    while True:
        query = {"project": fleet["project"], **params, **({"cursor": cursor} if cursor else {})}
        response = client.get("/runs", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        out += [by_id[run["id"]] for run in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return out


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("config.lr < 1e-5", "a"),
        ("config.lr <= 3e-5", "ab"),
        ("config.lr > 1e-5 and config.lr < 1", "bc"),
        ("config.lr >= 1e-4", "c"),
        ("config.lr = 3e-5", "b"),
        ("config.lr != 3e-5", "ac"),  # e's lr is a string: not a number, no match
        ("config.lr = fast", "e"),
        ("config.lr = 'fast'", "e"),
        ("config.optimizer.name = adam", "a"),
        ('config.optimizer.name in (adam, "adamw")', "ac"),
        ("config.optimizer.name not in (adam)", "bc"),
        ("config.optimizer.betas.1 > 0.95", "a"),
        ("config.optimizer.name contains ADA", "ac"),
        ("config.seed = 2", "b"),
        ("config.seed < 99999999999999999999999", "ab"),  # beyond 64 bits: a float
        ("config.seed = '3'", "c"),  # a string in YAML stays a string
        ("config.seed = 3", ""),
        ("config.seed = null", "de"),  # missing (d: a text config) or null
        ("config.seed != null", "abc"),
        ("config.warmup = true", "c"),
        ("config.warmup = false", ""),
        ("config.missing < 1 or config.missing = x", ""),
        ("not config.lr < 1e-5", "bc"),  # unknown (missing, a string) never matches
        ("summary.reward > 0.5", "ac"),
        ("summary.reward > 0.5 and config.lr < 1e-5", "a"),
        ("summary.best.step = 10", "a"),
        ("summary.note contains 'good run'", "c"),
        ("metric:loss < 0.4", "bc"),
        ("metric:loss = 0.5", "a"),
        ("metric:loss != null", "abc"),
        ("metric:loss = null", "de"),
        ("status = completed", "ac"),
        ("status in (failed, crashed)", "be"),
        ("status != running and not (tag = base)", "bc"),
        ("tag = rl", "ab"),
        ("tag != rl", "cde"),
        ("tag in (sweep-1, base)", "ace"),
        ("tag not in (rl)", "cde"),
        ("tag contains SWEEP", "c"),
        ("name contains llama", "ac"),
        ("name = run-b", "b"),
        ("kind = train and created > 1000000000", "abcde"),
        ("created < '2000-01-01'", ""),
        ("created >= 2000-01-01T00:00Z", "abcde"),
        ("(config.lr < 1e-5 or status = failed) and tag = rl", "ab"),
        ("config.lr < 1e-5 or summary.reward < 0.5 and tag = rl", "ab"),  # and binds tighter
        ("STATUS = completed AND Tag = rl", "a"),
    ],
)
def test_filter_language(client, fleet, expression, expected):
    assert names(client, fleet, filter=expression, sort="name") == list(expected)


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("summary.reward", "bca" + "ed"),  # numbers ascending, then no number (newest first)
        ("-summary.reward", "acb" + "ed"),
        ("-metric:loss", "acb" + "ed"),
        ("metric:loss", "bca" + "ed"),
        ("config.lr", "abc" + "ed"),
        ("-name", "edcba"),
        ("created", "abcde"),
        ("-created", "edcba"),
    ],
)
def test_sort_pages_through_every_run_once(client, fleet, sort, expected):
    for limit in (1, 2, 5):
        assert names(client, fleet, sort=sort, limit=limit) == list(expected)


def test_sort_with_ties_pages_by_seq(client):
    """Many runs with one summary value, pages of 3: none repeated, none lost."""
    project = f"ties-{uuid.uuid4().hex[:8]}"
    ids = []
    for i in range(8):
        run = create_run(client, project=project)
        client.patch(f"/runs/{run['id']}", json={"summary": {"score": i % 2}})
        ids.append(run["id"])
    seen: list[str] = []
    cursor = None
    while True:
        params = {"project": project, "sort": "-summary.score", "limit": 3}
        body = client.get("/runs", params={**params, **({"cursor": cursor} if cursor else {})})
        seen += [run["id"] for run in body.json()["items"]]
        cursor = body.json()["next_cursor"]
        if cursor is None:
            break
    odd = [ids[i] for i in (7, 5, 3, 1)]
    even = [ids[i] for i in (6, 4, 2, 0)]
    assert seen == odd + even


def test_columns_answer_values_per_run(client, fleet):
    body = client.get(
        "/runs",
        params={
            "project": fleet["project"],
            "filter": "tag = rl",
            "sort": "-summary.reward",
            "columns": "config.lr,config.optimizer,summary.reward,metric:loss,status,config.nope",
        },
    ).json()
    values = [run["values"] for run in body["items"]]
    assert values == [
        {
            "config.lr": 1e-6,
            "config.optimizer": {"name": "adam", "betas": [0.9, 0.99]},
            "summary.reward": 0.9,
            "metric:loss": 0.5,
            "status": "completed",
            "config.nope": None,
        },
        {
            "config.lr": 3e-5,
            "config.optimizer": {"name": "sgd"},
            "summary.reward": 0.4,
            "metric:loss": 0.1,
            "status": "failed",
            "config.nope": None,
        },
    ]
    plain = client.get("/runs", params={"project": fleet["project"]}).json()["items"][0]
    assert "values" not in plain and "config_values" not in plain


def test_plain_filters_combine_with_an_expression(client, fleet):
    assert names(client, fleet, filter="config.lr < 1", status="completed") == ["c", "a"]


def test_time_keyed_metric_is_a_latest_value(client):
    project = f"timed-{uuid.uuid4().hex[:8]}"
    run = create_run(client, project=project)
    rows = b"".join(
        orjson.dumps({"step": None, "ts": 1.0e9 + i, "values": {"tps": float(i)}}) + b"\n"
        for i in range(4)
    )
    assert upload(client, run["id"], "metrics", rows).status_code == 200
    body = client.get(
        "/runs", params={"project": project, "filter": "metric:tps = 3", "columns": "metric:tps"}
    ).json()
    assert [r["values"] for r in body["items"]] == [{"metric:tps": 3.0}]


@pytest.mark.parametrize(
    ("params", "code", "says"),
    [
        ({"filter": "config.lr <"}, "invalid_filter", "position 12, found the end"),
        ({"filter": "config.lr < abc"}, "invalid_filter", "'abc' is not a number"),
        ({"filter": "colour = red"}, "invalid_filter", "position 1, found 'colour'"),
        ({"filter": "(status = failed"}, "invalid_filter", "expected ')' at position 17"),
        ({"filter": "status = failed and"}, "invalid_filter", "position 20"),
        ({"filter": "status = failed status"}, "invalid_filter", "found 'status'"),
        ({"filter": "status ~ x"}, "invalid_filter", "unexpected '~' at position 8"),
        ({"filter": "status < 3"}, "invalid_filter", "status is text"),
        ({"filter": "metric:loss = x"}, "invalid_filter", "metric:loss at position 13 is a number"),
        ({"filter": "created > yesterday"}, "invalid_filter", "not 'yesterday'"),
        ({"filter": "name contains 3"}, "invalid_filter", "contains at position 6 takes a string"),
        ({"filter": "not " * 40 + "status = x"}, "invalid_filter", "deeper than 32"),
        ({"sort": "reward"}, "invalid_sort", "'reward' is not a field"),
        ({"sort": "-tag"}, "invalid_sort", "cannot be sorted by tag"),
        ({"columns": "config.lr,oops"}, "invalid_columns", "'oops' is not a field"),
        ({"sort": "name", "cursor": "WzFd"}, "invalid_cursor", "not one this server"),
        ({"sort": "-summary.x", "cursor": "WyJhIiwgMl0"}, "invalid_cursor", "another sort"),
    ],
)
def test_bad_queries_are_400_naming_the_problem(client, params, code, says):
    status, got_code, message = error_of(client.get("/runs", params=params))
    assert (status, got_code) == (400, code)
    assert says in message, message


def test_a_filter_sees_only_the_callers_team(teams):
    server, keys, _ = teams
    with (
        httpx.Client(
            base_url=server.url + "/api/v1", headers=_bearer(keys["red"]), timeout=REQUEST
        ) as red,
        httpx.Client(
            base_url=server.url + "/api/v1", headers=_bearer(keys["blue"]), timeout=REQUEST
        ) as blue,
    ):
        create_run(red, config={"format": "json", "text": '{"lr": 1}'})
        create_run(blue, config={"format": "json", "text": '{"lr": 1}'})
        for http in (red, blue):
            items = http.get("/runs", params={"filter": "config.lr = 1"}).json()["items"]
            assert len(items) == 1


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_migration_fills_the_config_values_of_existing_runs(backend, stores_factory, tmp_path):
    old = {"toml": 'lr = 0.5\n[opt]\nname = "adam"\n', "text": "just words"}
    with database_at("0011", backend, stores_factory, tmp_path) as (url, conn):
        for form, text in old.items():
            conn.execute(
                insert(runs_table).values(
                    id=f"old-{form}", team_id="red", kind="eval", environments="[]", tags="[]",
                    status="running", summary="{}", losses="{}", created_at=1.0, updated_at=1.0,
                    config=orjson.dumps({"format": form, "text": text}).decode(),
                )
            )  # fmt: skip
    store = Store.open(url)  # migrates to the newest schema
    try:
        rows = store.db.read_sync(
            lambda conn: dict(
                conn.execute(select(runs_table.c.id, runs_table.c.config_values)).all()
            )
        )
    finally:
        store.close()
    assert orjson.loads(rows["old-toml"]) == {"lr": 0.5, "opt": {"name": "adam"}}
    assert rows["old-text"] is None
