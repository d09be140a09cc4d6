"""Annotations over HTTP, folded on read; a run's fill and resume."""

from __future__ import annotations

import pytest

from openruns.rundir import batch_key

from .helpers import create_run, error_of, ndjson, upload


def test_annotations_arrive_before_or_after_their_episode_and_replay_changes_nothing(client):
    rid = create_run(client)["id"]
    early = ndjson([{"episode_id": "e1", "step": 4, "info": {"a": {"x": 1}}, "producer": "t"}])
    assert upload(client, rid, "annotations", early).json() == {
        "status": "committed",
        "annotations": 1,
        "receipt": batch_key(early),
    }
    episode = {"id": "e1", "annotated_branches": "mine", "info": "not an object", "traces": []}
    upload(client, rid, "episodes", ndjson([episode]))
    late = ndjson(
        [
            {"episode_id": "e1", "info": {"a": {"y": 2}}, "branches": [{"index": 1, "s": [1]}]},
            {"episode_id": "e1", "trace_id": "absent", "info": {"b": 3}},
        ]
    )
    upload(client, rid, "annotations", late)
    upload(client, rid, "annotations", late)  # a replay: the first receipt, nothing stored
    folded = client.get(f"/runs/{rid}/episodes/e1").json()
    # A trace id the episode does not have falls back to the episode; fields of the record
    # that are not objects are replaced, never a 500.
    assert folded["info"] == {"a": {"x": 1, "y": 2}, "b": 3}
    assert folded["annotated_branches"] == [{"index": 0}, {"index": 1, "s": [1]}]
    assert folded["annotations"] == {"count": 3, "producers": ["main", "t"], "trained_step": 4}
    listed = client.get(f"/runs/{rid}/annotations", params={"episode_id": "e1", "limit": 2})
    page = listed.json()
    assert [a["producer"] for a in page["items"]] == ["t", "main"] and page["next_cursor"]
    rest = client.get(
        f"/runs/{rid}/annotations", params={"episode_id": "e1", "cursor": page["next_cursor"]}
    ).json()
    assert [a["info"] for a in rest["items"]] == [{"b": 3}] and rest["next_cursor"] is None
    export = client.get(f"/runs/{rid}/export/annotations.ndjson")
    assert len(export.content.splitlines()) == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"step": 1}', "line 2: episode_id must be a string"),
        (b'{"episode_id": "e", "step": "3"}', "line 2: step (the step trained at) must be"),
        (b'{"episode_id": "e", "info": []}', "line 2: info must be an object"),
        (b'{"episode_id": "e", "branches": [{"index": 70000}]}', "line 2: branches must be"),
        (b'{"episode_id": "e", "branches": {}}', "line 2: branches must be"),
        (b'{"episode_id": "e", "producer": ""}', "line 2: producer must be"),
        (b'{"episode_id": "e", "ts": "now"}', "line 2: ts must be a number"),
    ],
)
def test_a_bad_annotation_is_a_400_naming_its_line(client, line, message):
    rid = create_run(client)["id"]
    response = upload(client, rid, "annotations", b'{"episode_id": "ok"}\n' + line + b"\n")
    status, code, text = error_of(response)
    assert (status, code) == (400, "invalid_annotation") and text.startswith(message), text
    assert client.get(f"/runs/{rid}/annotations").json()["items"] == []  # nothing kept


def test_fill_sets_only_what_the_run_has_none_of(client):
    rid = create_run(client, name="owner", tags=[])["id"]
    fill = {"name": "child", "model": "m", "tags": ["a"], "error": "RuntimeError: x (t)"}
    doc = client.patch(f"/runs/{rid}", json={"fill": fill}).json()
    assert (doc["name"], doc["model"], doc["tags"]) == ("owner", "m", ["a"])
    assert doc["status"] == "running" and doc["error"] == "RuntimeError: x (t)"
    again = client.patch(f"/runs/{rid}", json={"fill": {"model": "n", "error": "other"}}).json()
    assert (again["model"], again["error"]) == ("m", "RuntimeError: x (t)")  # first one wins
    assert [r["id"] for r in client.get("/runs", params={"tag": "a"}).json()["items"]] == [rid]
    failed = client.post(f"/runs/{rid}/finish", json={"status": "failed"}).json()
    assert failed["error"] == "RuntimeError: x (t)"  # kept: the finish gave none


def test_resume_reopens_an_ended_run(client):
    rid = create_run(client, name="r")["id"]
    client.post(f"/runs/{rid}/finish", json={"status": "crashed", "error": "gone"})
    reopened = client.post(
        "/runs", json={"id": rid, "kind": "train", "resume": True}, headers={"Idempotency-Key": rid}
    )
    doc = reopened.json()
    assert reopened.status_code == 200
    assert (doc["status"], doc["error"], doc["finished_at"], doc["name"]) == (
        "running",
        None,
        None,
        "r",
    )
    hosted = create_run(client, heartbeat=False)
    assert hosted["last_heartbeat_at"] is None  # "at infinity": never stale
