"""
Upload rules, the same on every route and both stores (issue 12): an Idempotency-Key names one
body; episode steps follow the metrics rules; an episode id is one episode per run; ids with
"/" open.
"""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pytest

import openruns
from openruns.batches import BATCH_CONTENT_TYPE, header_frame, parse_header
from openruns.wire import WireClient

from .helpers import api, create_run, error_of, ndjson, upload
from .test_batches import _batch, _episode


def _key_reused(response, key: str) -> None:
    status, code, message = error_of(response)
    assert (status, code) == (422, "idempotency_key_reused"), message
    assert key in message


@pytest.mark.parametrize(
    ("kind", "first", "second"),
    [
        ("episodes", [{"id": "a", "traces": []}], [{"id": "b", "traces": []}]),
        ("annotations", [{"episode_id": "a", "info": {"x": 1}}], [{"episode_id": "a"}]),
        (
            "logs",
            [{"ts": 1, "stream": "stdout", "line": "x"}],
            [{"ts": 2, "stream": "stdout", "line": "y"}],
        ),
    ],
)
def test_a_key_reused_with_another_body_is_422_and_stores_nothing(client, kind, first, second):
    rid = create_run(client)["id"]
    key = f"client-key-{kind}"
    receipt = upload(client, rid, kind, ndjson(first), key=key)
    assert receipt.status_code == 200, receipt.text
    # The same key and the same body, even sent with another encoding: the first receipt.
    assert upload(client, rid, kind, ndjson(first), "gzip", key=key).json() == receipt.json()
    _key_reused(upload(client, rid, kind, ndjson(second), key=key), key)
    if kind == "episodes":
        assert client.get(f"/runs/{rid}/episodes/b").status_code == 404


def test_an_sdk_batch_key_reused_with_another_batch_is_422(make_server):
    server = make_server()
    wire = WireClient(server.url, None)
    first = _batch([_episode(i) for i in range(3)])
    other = _batch([_episode(i) for i in range(3, 5)])
    with api(server.url) as client:
        rid = create_run(client)["id"]
        receipt = wire.upload(rid, "episodes", first.parts, key=first.key)
        assert wire.upload(rid, "episodes", first.parts, key=first.key) == receipt  # a replay
        headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": first.key}
        reused = client.post(
            f"/runs/{rid}/episodes", content=b"".join(other.parts), headers=headers
        )
        _key_reused(reused, first.key)
        assert client.get(f"/runs/{rid}/episodes/e3").status_code == 404
    wire.close()


BAD_STEPS = [-1, 1.5, True, "3", 1e30, 2**63]


@pytest.mark.parametrize("step", BAD_STEPS)
def test_episode_steps_outside_the_metrics_rules_are_400_naming_the_field(client, step):
    rid = create_run(client)["id"]
    for record, field in (
        ({"id": "a", "run": {"work": {"step": step}}, "traces": []}, "run.work.step"),
        ({"id": "a", "step": step, "traces": []}, "step"),
    ):
        for stream in ("episodes", "traces"):
            response = upload(client, rid, "episodes", ndjson([record]), stream=stream)
            status, code, message = error_of(response)
            assert (status, code) == (400, "invalid_record"), message
            assert f"line 1: {field} must be an integer from 0" in message
    note = ndjson([{"episode_id": "a", "step": step}])
    status, code, message = error_of(upload(client, rid, "annotations", note))
    assert status == 400 and "step" in message, message
    assert client.get(f"/runs/{rid}/episodes", params={"limit": 10}).json()["items"] == []


@pytest.mark.parametrize("step", [-1, 1.5, True, "3", 1e30])
def test_sdk_batch_rows_follow_the_same_step_rules(client, step):
    rid = create_run(client)["id"]
    batch = _batch([_episode(0)])
    header, start = parse_header(b"".join(batch.parts))
    header["rows"][0]["step"] = step
    body = header_frame(header) + b"".join(batch.parts)[start:]
    headers = {"Content-Type": BATCH_CONTENT_TYPE, "Idempotency-Key": f"k-{step!r}"}
    status, code, message = error_of(
        client.post(f"/runs/{rid}/episodes", content=body, headers=headers)
    )
    assert (status, code) == (400, "invalid_batch"), message
    assert "row 0: step" in message


def test_steps_at_the_bounds_are_taken(client):
    rid = create_run(client)["id"]
    records = [{"id": "zero", "step": 0, "traces": []}, {"id": "null", "step": None, "traces": []}]
    assert upload(client, rid, "episodes", ndjson(records)).json()["records"] == 2


def test_the_same_episode_id_twice_is_one_episode_the_first(client):
    rid = create_run(client)["id"]
    first = {"id": "ep", "run": {"work": {"step": 1}}, "traces": [{"reward": 1.0}], "v": 1}
    again = {**first, "traces": [{"reward": 0.0}], "v": 2}
    assert upload(client, rid, "episodes", ndjson([first])).json()["records"] == 1
    # Another upload (another key) with the same id, and a repeat inside one upload.
    later = ndjson([again, {"id": "new", "traces": []}, {**again, "v": 3}])
    receipt = upload(client, rid, "episodes", later).json()
    assert (receipt["records"], receipt["duplicates"]) == (1, 2)
    assert orjson.loads(client.get(f"/runs/{rid}/episodes/ep").content)["v"] == 1
    items = client.get(f"/runs/{rid}/episodes", params={"limit": 10}).json()["items"]
    assert sorted(item["id"] for item in items) == ["ep", "new"]
    assert [s["count"] for s in client.get(f"/runs/{rid}/steps").json()] == [1, 1]
    exported = [
        orjson.loads(line)
        for line in client.get(f"/runs/{rid}/export/episodes.ndjson").content.splitlines()
    ]
    assert sorted((r["id"], r.get("v")) for r in exported) == [("ep", 1), ("new", None)]
    # The SDK's batches follow the same rule.
    batch = _batch([_episode(0), {**_episode(1), "id": "ep"}])
    wire = WireClient(str(client.base_url).rstrip("/").removesuffix("/api/v1"), None)
    wire_receipt = wire.upload(rid, "episodes", batch.parts, key=batch.key)
    wire.close()
    assert (wire_receipt["records"], wire_receipt["duplicates"]) == (1, 1)
    assert orjson.loads(client.get(f"/runs/{rid}/episodes/ep").content)["v"] == 1


def test_an_episode_id_with_a_slash_opens_in_the_api_and_the_dashboard(client):
    rid = create_run(client)["id"]
    upload(client, rid, "episodes", ndjson([{"id": "gsm8k/12", "traces": [], "x": 1}]))
    for path in (quote("gsm8k/12", safe=""), "gsm8k/12"):  # as links have it; typed by hand
        assert orjson.loads(client.get(f"/runs/{rid}/episodes/{path}").content)["x"] == 1
        page = client.get(
            f"{client.base_url.scheme}://{client.base_url.netloc.decode()}/runs/{rid}/episodes/{path}"
        )
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_an_episode_logged_again_with_another_subset_is_found_under_both(
    shared_server, client, tmp_path
):
    # prime-rl logs an episode as `all` on arrival, and again as `effective` when it is shipped
    # to the trainer (seed 001): the record is kept once, the later marking as well (issue 20).
    run = openruns.init(
        kind="train", base_url=shared_server.url, dir=tmp_path, system_metrics_interval=0
    )
    arrived = [{"id": f"ep-{i}", "traces": [{"reward": float(i)}]} for i in range(4)]
    run.log_episodes(arrived, step=3, kind="train", subset="all")
    assert run.flush(timeout=60)
    run.log_episodes(arrived[1:3], step=3, kind="train", subset="effective")  # shipped later
    run.finish()
    assert (run.errors, run.failed_records) == ([], {})

    def ids(**params: str) -> list[str]:
        items = client.get(f"/runs/{run.id}/episodes", params={"limit": 50, **params})
        return sorted(item["id"] for item in items.json()["items"])

    assert ids() == ["ep-0", "ep-1", "ep-2", "ep-3"]  # each stored once
    assert ids(subset="all") == ["ep-0", "ep-1", "ep-2", "ep-3"]
    assert ids(subset="effective") == ["ep-1", "ep-2"]
    assert ids(subset="effective", step="3") == ["ep-1", "ep-2"]
    steps = client.get(f"/runs/{run.id}/steps", params={"subset": "effective"}).json()
    assert [(s["step"], s["count"]) for s in steps] == [(3, 2)]
    exported = client.get(
        f"/runs/{run.id}/export/episodes.ndjson", params={"subset": "effective"}
    ).content.splitlines()
    assert sorted(orjson.loads(line)["id"] for line in exported) == ["ep-1", "ep-2"]


def test_an_sdk_batch_with_a_record_over_the_limit_is_refused_naming_it(make_server, tmp_path):
    server = make_server(max_record_bytes=64 * 1024)
    run = openruns.init(kind="train", base_url=server.url, dir=tmp_path, system_metrics_interval=0)
    run.log_episodes([{"id": "huge", "traces": [{"text": "x" * 100_000}]}], step=0)
    assert run.flush(timeout=60)
    run.log_episodes([{"id": "small", "traces": []}], step=0)  # the sink goes on
    run.finish()
    assert run.failed_records == {"server": 1}
    assert any("record 'huge'" in e and "65536" in e for e in run.errors), run.errors
    with api(server.url) as http:
        items = http.get(f"/runs/{run.id}/episodes").json()["items"]
        assert [item["id"] for item in items] == ["small"]
        # The same limit as the NDJSON path's.
        record = ndjson([{"id": "huge", "traces": [{"text": "x" * 100_000}]}])
        status, code, _ = error_of(upload(http, run.id, "episodes", record))
        assert (status, code) == (413, "line_too_large")
