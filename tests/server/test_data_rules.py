"""
Data rules, the same everywhere: run ids (a safe alphabet, unique per team and revealing
nothing about other teams), NaN and infinities in JSON bodies (400 naming the field), and
steps at the largest value allowed (no overflow anywhere).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid

import pytest
from sqlalchemy import insert

from openruns.server.store import Store
from openruns.server.store.metrics import MAX_STEP
from openruns.server.store.schema import runs as runs_table

from .helpers import (
    api,
    create_run,
    database_at,
    episode,
    error_of,
    metric_rows,
    ndjson,
    upload,
)


def _unique(prefix: str = "r") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def test_run_ids_outside_the_safe_alphabet_are_400(client):
    for bad in (
        ".",
        "..",
        "a/b",
        "../etc",
        "-rf",
        ".hidden",
        "_x",
        "a b",
        "é",
        "x" * 65,
        "",
        "run\n",
    ):
        status, code, message = error_of(client.post("/runs", json={"kind": "eval", "id": bad}))
        assert (status, code) == (400, "invalid_run_id"), (bad, message)
        assert "letters, digits" in message
    for good in (_unique(), f"R.{uuid.uuid4().hex[:8]}_b-3", (uuid.uuid4().hex * 2)[:64]):
        assert create_run(client, id=good)["id"] == good


def test_run_ids_are_per_team_and_a_taken_id_reveals_nothing(teams):
    server, keys, _ = teams
    run_id = _unique()
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        mine = red.post("/runs", json={"id": run_id, "kind": "train", "name": "red's"})
        fresh = blue.post("/runs", json={"id": _unique(), "kind": "eval"})
        theirs = blue.post("/runs", json={"id": run_id, "kind": "eval", "name": "blue's"})
        # The same answer as for an id nobody uses: blue gets its own run.
        assert mine.status_code == fresh.status_code == theirs.status_code == 201
        assert theirs.json()["team_id"] == "blue" and theirs.json()["name"] == "blue's"
        # Idempotent create by id keeps working, within each team.
        again = blue.post("/runs", json={"id": run_id, "kind": "eval"})
        assert again.status_code == 200 and again.json()["name"] == "blue's"
        assert red.get(f"/runs/{run_id}").json()["name"] == "red's"
        assert blue.get(f"/runs/{run_id}").json()["name"] == "blue's"
        assert upload(blue, run_id, "metrics", metric_rows([0], b=2.0)).status_code == 200
        assert red.get(f"/runs/{run_id}/metrics/keys").json() == []
    # Each run token reaches its own team's run of that id, and nothing else.
    for token, name in ((mine.json()["token"], "red's"), (theirs.json()["token"], "blue's")):
        with api(server.url, token) as bearer:
            assert bearer.get(f"/runs/{run_id}").json()["name"] == name
            assert [r["name"] for r in bearer.get("/runs").json()["items"]] == [name]
    assert mine.json()["token"] != theirs.json()["token"]


def test_a_run_token_minted_before_ids_were_per_team_still_reaches_its_run(teams):
    server, keys, stores = teams
    run_id = _unique()
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        create_run(red, id=run_id, name="first")
        create_run(blue, id=run_id, name="later")
    store = stores.open_store()
    secret = store.secret
    store.close()
    legacy = "orr_" + hmac.new(secret, run_id.encode(), hashlib.sha256).hexdigest() + "_" + run_id
    with api(server.url, legacy) as bearer:
        assert bearer.get(f"/runs/{run_id}").json()["name"] == "first"
        assert upload(bearer, run_id, "metrics", metric_rows([0], a=1.0)).status_code == 200
    forged = "orr_" + hmac.new(b"x" * 32, run_id.encode(), hashlib.sha256).hexdigest()
    with api(server.url, f"{forged}_{run_id}") as bearer:
        assert error_of(bearer.get(f"/runs/{run_id}"))[:2] == (401, "unauthorized")


def test_auth_off_keeps_ids_unique_across_team_labels(client):
    run_id = _unique()
    assert create_run(client, id=run_id, team_id="a")["team_id"] == "a"
    status, code, _ = error_of(client.post("/runs", json={"id": run_id, "kind": "eval"}))
    assert (status, code) == (409, "run_id_taken")


def test_a_database_migrated_before_per_team_ids_keeps_its_runs(backend, stores_factory, tmp_path):
    with database_at("0006", backend, stores_factory, tmp_path) as (url, conn):
        conn.execute(
            insert(runs_table).values(
                id="old-run", team_id="red", kind="eval", environments="[]", tags="[]",
                status="running", summary="{}", losses="{}", created_at=1.0, updated_at=1.0,
            )
        )  # fmt: skip
    store = Store.open(url)  # migrates to the newest schema
    try:
        old = store.db.read_sync(lambda conn: _get(conn, "old-run", "red"))
        assert old is not None and old["kind"] == "eval"
        blue, created = store.db.write_sync(
            lambda conn: _create(conn, "blue", {"id": "old-run", "kind": "train"})
        )
        assert created and blue["team_id"] == "blue" and blue["seq"] != old["seq"]
    finally:
        store.close()


def _get(conn, run_id, team):
    from openruns.server.store import runs

    return runs.get_run(conn, run_id, team)


def _create(conn, team, fields):
    from openruns.server.store import runs

    return runs.create_run(conn, team, fields, None, 2.0)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("patch", "/runs/{id}", b'{"summary": {"loss": NaN}}', "summary.loss"),
        ("patch", "/runs/{id}", b'{"summary": {"a": [1, -Infinity]}}', "summary.a[1]"),
        ("post", "/runs", b'{"kind": "eval", "training": {"lr": Infinity}}', "training.lr"),
        (
            "post",
            "/runs/{id}/finish",
            b'{"status": "failed", "losses": {"dropped_records": NaN}}',
            "losses.dropped_records",
        ),
    ],
)
def test_nan_and_infinities_in_json_bodies_are_400_naming_the_field(
    client, method, path, body, field
):
    run = create_run(client)
    response = client.request(
        method.upper(),
        path.format(id=run["id"]),
        content=body,
        headers={"Content-Type": "application/json"},
    )
    status, code, message = error_of(response)
    assert (status, code) == (400, "non_finite_number")
    assert message.startswith(f"{field}: ")
    stored = client.get(f"/runs/{run['id']}").json()
    assert stored["summary"] == {} and stored["status"] == "running"  # nothing half-applied


def test_the_words_nan_and_infinity_in_strings_are_kept(client):
    run = create_run(client)
    body = b'{"summary": {"note": "NaN", "Infinity": "x"}, "tags": ["NaN"]}'
    response = client.patch(
        f"/runs/{run['id']}", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["summary"] == {"note": "NaN", "Infinity": "x"}


def test_metrics_at_the_largest_step_are_stored_and_read(client):
    run = create_run(client)["id"]
    for steps in ([MAX_STEP], [MAX_STEP - 1, MAX_STEP], [MAX_STEP - 4000, MAX_STEP - 17]):
        response = upload(client, run, "metrics", metric_rows(steps, loss=lambda s: s % 7))
        assert response.status_code == 200, response.text
    series = client.get(f"/runs/{run}/metrics").json()["series"]["loss"]
    assert series["step"] == [MAX_STEP - 4000, MAX_STEP - 17, MAX_STEP - 1, MAX_STEP]
    few = client.get(f"/runs/{run}/metrics", params={"max_points": 2}).json()
    assert few["downsampled"] and few["series"]["loss"]["step"][-1] == MAX_STEP
    tail = client.get(f"/runs/{run}/metrics", params={"step_min": MAX_STEP}).json()
    assert tail["series"]["loss"]["step"] == [MAX_STEP]
    keys = client.get(f"/runs/{run}/metrics/keys").json()
    assert keys[0]["last_step"] == MAX_STEP and keys[0]["count"] == 4
    exported = client.get(f"/runs/{run}/export/metrics.ndjson").text.splitlines()
    assert len(exported) == 4


def test_episodes_at_the_largest_step_are_stored_and_read(client):
    run = create_run(client)["id"]
    records = [episode(0, MAX_STEP, 1.0), episode(1, MAX_STEP - 1, 0.5)]
    assert upload(client, run, "episodes", ndjson(records)).status_code == 200
    steps = client.get(f"/runs/{run}/steps").json()
    assert [s["step"] for s in steps] == [MAX_STEP - 1, MAX_STEP]
    page = client.get(f"/runs/{run}/episodes", params={"step": MAX_STEP}).json()
    assert [e["id"] for e in page["items"]] == [f"ep-{MAX_STEP}-0"]
    quantiles = client.get(f"/runs/{run}/rewards/quantiles", params={"max_points": 1}).json()
    assert quantiles["step"] == [MAX_STEP] and quantiles["count"] == [2]
