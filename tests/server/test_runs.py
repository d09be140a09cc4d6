"""Runs over HTTP: create (idempotent), list, read, patch, finish, heartbeat, crash detection."""

from __future__ import annotations

import time
import uuid

from .. import patience
from .helpers import api, create_run, error_of


def test_create_returns_the_run_with_a_token(client):
    config = {"format": "toml", "text": "lr = 1e-6\n", "filename": "rl.toml"}
    response = client.post(
        "/runs",
        json={
            "kind": "train",
            "name": "rl-1",
            "model": "Qwen/Qwen3-8B",
            "environments": [{"name": "gsm8k"}],
            "framework": "prime-rl",
            "tags": ["a", "b", "a"],
            "config": config,
            "training": {"max_steps": 100},
        },
    )
    assert response.status_code == 201
    run = response.json()
    assert len(run["id"]) == 24
    assert run["status"] == "running" and run["team_id"] == "default"
    assert run["tags"] == ["a", "b"]
    assert run["config"] == config and run["training"] == {"max_steps": 100}
    assert run["losses"] == {"dropped_records": 0, "failed_records": {}}
    assert run["url"] == f"/runs/{run['id']}"
    assert run["token"].startswith("orr_") and run["token"].endswith(run["id"])
    got = client.get(f"/runs/{run['id']}").json()
    assert got == {k: v for k, v in run.items() if k != "token"}


def test_create_is_idempotent_by_id_and_by_key(client):
    run_id = f"client-{uuid.uuid4().hex[:8]}"
    first = client.post("/runs", json={"id": run_id, "kind": "eval"})
    again = client.post("/runs", json={"id": run_id, "kind": "eval"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()

    key = uuid.uuid4().hex
    one = client.post("/runs", json={"kind": "eval"}, headers={"Idempotency-Key": key})
    two = client.post("/runs", json={"kind": "eval"}, headers={"Idempotency-Key": key})
    assert (one.status_code, two.status_code) == (201, 200)
    assert one.json()["id"] == two.json()["id"]


def test_create_rejects_bad_fields_by_name(client):
    status, code, message = error_of(client.post("/runs", json={"kind": "nope"}))
    assert (status, code) == (422, "invalid_request") and "body.kind" in message
    status, code, message = error_of(client.post("/runs", json={"kind": "eval", "id": "a/b"}))
    assert (status, code) == (400, "invalid_run_id") and "'a/b'" in message
    status, code, message = error_of(client.post("/runs", json={"kind": "eval", "colour": 1}))
    assert status == 422 and "colour" in message
    response = client.post(
        "/runs", content=b'{"kind": ', headers={"Content-Type": "application/json"}
    )
    assert error_of(response)[:2] == (400, "invalid_json")


def test_list_filters_and_pages_newest_first(client):
    tag = uuid.uuid4().hex[:8]
    made = [
        create_run(client, kind="train" if i % 2 else "eval", name=f"Sweep-{tag}-{i}", tags=[tag])
        for i in range(5)
    ]
    ids = [r["id"] for r in reversed(made)]
    page = client.get("/runs", params={"tag": tag, "limit": 2}).json()
    seen = [r["id"] for r in page["items"]]
    while page["next_cursor"]:
        page = client.get("/runs", params={"tag": tag, "limit": 2, "cursor": page["next_cursor"]})
        page = page.json()
        seen += [r["id"] for r in page["items"]]
    assert seen == ids

    trains = client.get("/runs", params={"tag": tag, "kind": "train"}).json()["items"]
    assert [r["id"] for r in trains] == [made[3]["id"], made[1]["id"]]
    named = client.get("/runs", params={"name": f"sweep-{tag}-4"}).json()["items"]
    assert [r["id"] for r in named] == [made[4]["id"]]
    client.post(f"/runs/{made[0]['id']}/finish", json={"status": "failed", "error": "boom"})
    failed = client.get("/runs", params={"tag": tag, "status": "failed"}).json()["items"]
    assert [r["id"] for r in failed] == [made[0]["id"]]
    assert client.get("/runs", params={"name": "%"}).status_code == 200  # LIKE is escaped
    assert error_of(client.get("/runs", params={"cursor": "garbage"}))[:2] == (
        400,
        "invalid_cursor",
    )
    assert client.get("/runs", params={"limit": 501}).status_code == 422


def test_patch_merges_summary_and_replaces_the_rest(client):
    run = create_run(client, tags=["x"], description="first")
    rid = run["id"]
    client.patch(f"/runs/{rid}", json={"summary": {"a": 1, "b": {"c": 2}}})
    patched = client.patch(
        f"/runs/{rid}",
        json={"summary": {"b": 3}, "tags": ["y", "z"], "losses": {"dropped_records": 2}},
    ).json()
    assert patched["summary"] == {"a": 1, "b": 3}
    assert patched["tags"] == ["y", "z"]
    assert patched["losses"] == {"dropped_records": 2, "failed_records": {}}
    assert patched["description"] == "first"
    assert client.patch(f"/runs/{rid}", json={"description": None}).json()["description"] is None
    assert [r["id"] for r in client.get("/runs", params={"tag": "z"}).json()["items"]][0] == rid
    assert client.get("/runs", params={"tag": "x"}).json()["items"] == []
    response = client.patch(f"/runs/{rid}", json={"summary": {"big": 2**70}})
    assert error_of(response)[:2] == (400, "invalid_field")
    assert error_of(client.patch("/runs/nope", json={}))[:2] == (404, "not_found")


def test_finish_is_a_compare_and_set(client):
    rid = create_run(client)["id"]
    body = {"status": "completed", "summary": {"acc": 0.5}, "losses": {"dropped_records": 1}}
    done = client.post(f"/runs/{rid}/finish", json=body)
    assert done.status_code == 200
    run = done.json()
    assert run["status"] == "completed" and run["finished_at"] is not None
    assert run["summary"] == {"acc": 0.5} and run["losses"]["dropped_records"] == 1
    again = client.post(f"/runs/{rid}/finish", json={"status": "completed"})
    assert again.status_code == 200 and again.json()["finished_at"] == run["finished_at"]
    status, code, message = error_of(client.post(f"/runs/{rid}/finish", json={"status": "failed"}))
    assert (status, code) == (409, "run_finished") and "completed" in message
    assert client.post(f"/runs/{rid}/finish", json={"status": "running"}).status_code == 422


def test_silent_runs_become_crashed(make_server):
    # A timeout several times the longest gap between two beats of a loaded machine.
    server = make_server(heartbeat_timeout=4.0)
    with api(server.url) as http:
        beating = create_run(http)["id"]
        http.post(f"/runs/{beating}/heartbeat")
        silent = create_run(http)["id"]
        finished = create_run(http)["id"]
        hosted = create_run(http, heartbeat=False)["id"]  # a scheduler's: no owner process
        http.post(f"/runs/{finished}/finish", json={"status": "completed"})
        deadline = time.monotonic() + patience.SETTLE  # the silent run crashes after ~4 s
        while (crashed := http.get(f"/runs/{silent}").json())["status"] != "crashed":
            assert time.monotonic() < deadline, crashed
            assert http.post(f"/runs/{beating}/heartbeat").json() == {"status": "running"}
            time.sleep(0.1)
        assert crashed["error"].startswith("no heartbeat for ")
        assert "stopped without closing it" in crashed["error"]
        assert http.get(f"/runs/{beating}").json()["status"] == "running"
        assert http.get(f"/runs/{finished}").json()["status"] == "completed"
        assert http.get(f"/runs/{hosted}").json()["status"] == "running"
        assert crashed["status_by"] == "sweeper"
        assert [(c["status"], c["by"]) for c in crashed["status_history"]] == [
            ("crashed", "sweeper")
        ]
        # The crash was the sweeper's guess: its owner's heartbeat is its word, and wins (issue
        # 20); a run its owner closed stays closed.
        assert http.post(f"/runs/{silent}/heartbeat").json() == {"status": "running"}
        revived = http.get(f"/runs/{silent}").json()
        assert (revived["status"], revived["error"], revived["status_by"]) == (
            "running",
            None,
            "owner",
        )
        assert [(c["status"], c["by"]) for c in revived["status_history"]] == [
            ("crashed", "sweeper"),
            ("running", "owner"),
        ]
        assert http.post(f"/runs/{finished}/heartbeat").json() == {"status": "completed"}


def test_crash_is_detected_on_read_without_the_sweeper(make_server, new_stores):
    stores = new_stores()
    first = make_server(stores)
    with api(first.url) as http:
        rid = create_run(http)["id"]
    first.stop()
    # A replica with a tiny timeout: the read itself notices (the sweep may not have run yet).
    second = make_server(stores, heartbeat_timeout=0.05)
    time.sleep(0.1)
    with api(second.url) as http:
        assert http.get(f"/runs/{rid}").json()["status"] == "crashed"


def test_public_url_makes_absolute_links(make_server):
    server = make_server(public_url="https://runs.example.com/")
    with api(server.url) as http:
        run = create_run(http)
    assert run["url"] == f"https://runs.example.com/runs/{run['id']}"
