"""Metrics over HTTP: ingest in every encoding, merge, replay, reads, bad rows."""

from __future__ import annotations

import pytest

from openruns.rundir import batch_key

from .helpers import create_run, error_of, metric_rows, upload


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "identity"])
def test_ingest_then_read_back_exactly(client, encoding):
    rid = create_run(client)["id"]
    data = metric_rows(range(300), loss=lambda s: 1.0 / (s + 1), step_time=2)
    response = upload(client, rid, "metrics", data, encoding)
    assert response.status_code == 200
    assert response.json() == {"status": "committed", "rows": 300, "receipt": batch_key(data)}
    keys = client.get(f"/runs/{rid}/metrics/keys").json()
    assert keys == [
        {"key": "loss", "last_step": 299, "last_value": 1.0 / 300, "count": 300},
        {"key": "step_time", "last_step": 299, "last_value": 2.0, "count": 300},
    ]
    series = client.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()
    assert series["downsampled"] is False
    assert series["series"]["loss"]["step"] == list(range(300))
    assert series["series"]["loss"]["value"] == [1.0 / (s + 1) for s in range(300)]
    only = client.get(f"/runs/{rid}/metrics", params={"keys": "step_time,nope"}).json()
    assert list(only["series"]) == ["step_time"]


def test_merge_is_last_write_wins_and_a_replay_writes_nothing(client):
    rid = create_run(client)["id"]
    first = metric_rows(range(10), loss=1.0)
    assert upload(client, rid, "metrics", first).status_code == 200
    second = metric_rows(range(5, 15), loss=2.0)
    upload(client, rid, "metrics", second)
    # The same key with another body: the first receipt, and nothing is written.
    replay = upload(client, rid, "metrics", metric_rows(range(20), loss=9.0), key=batch_key(first))
    assert replay.json() == {"status": "committed", "rows": 10, "receipt": batch_key(first)}
    # Without a key, the body's hash is the key: an identical body is a replay too.
    assert upload(client, rid, "metrics", second, key=None).json()["receipt"] == batch_key(second)
    values = client.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()["series"]["loss"]
    assert values["step"] == list(range(15))
    assert values["value"] == [1.0] * 5 + [2.0] * 10
    # Within one batch, the later row of a (step, key) wins.
    dup = b'{"step": 100, "values": {"loss": 1}}\n{"step": 100, "values": {"loss": 3}}\n'
    upload(client, rid, "metrics", dup)
    last = client.get(f"/runs/{rid}/metrics/keys").json()[0]
    assert (last["last_step"], last["last_value"]) == (100, 3.0)


def test_downsampled_read_keeps_spikes(client):
    rid = create_run(client)["id"]
    spikes = {12345: 1000.0, 77777: -500.0}
    data = metric_rows(range(100_000), grad_norm=lambda s: spikes.get(s, 1.0))
    assert upload(client, rid, "metrics", data).status_code == 200
    got = client.get(f"/runs/{rid}/metrics", params={"keys": "grad_norm", "max_points": 200})
    body = got.json()
    series = body["series"]["grad_norm"]
    assert body["downsampled"] is True and len(series["step"]) <= 200
    assert max(series["max"]) == 1000.0 and min(series["min"]) == -500.0
    assert series["step"][-1] == 99_999 and series["value"][-1] == 1.0
    zoom = client.get(
        f"/runs/{rid}/metrics",
        params={"keys": "grad_norm", "step_min": 12000, "step_max": 12999, "max_points": 10},
    ).json()["series"]["grad_norm"]
    assert zoom["step"][-1] == 12999 and max(zoom["max"]) == 1000.0 and len(zoom["step"]) <= 10


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"step": -1, "values": {}}', "line 2: step must be an integer"),
        (b'{"step": 1.5, "values": {}}', "line 2: step must be an integer"),
        (b'{"step": 1}', "line 2: values must be an object"),
        (b'{"step": 1, "values": {"a": "x"}}', "line 2: values['a'] must be a number"),
        (b'{"step": 1, "values": {"": 1}}', "line 2: metric names must have"),
        (b'{"step": 1, "ts": "now", "values": {}}', "line 2: ts must be a number"),
        (b'{"step": 1, "values": {"a": 1}', "line 2: invalid JSON"),
        (b"[1, 2]", "line 2: expected a JSON object, got an array"),
    ],
)
def test_bad_rows_are_named_by_line(client, line, message):
    rid = create_run(client)["id"]
    body = b'{"step": 0, "values": {"ok": 1}}\n' + line + b"\n"
    status, code, text = error_of(upload(client, rid, "metrics", body))
    assert status == 400 and message in text
    assert client.get(f"/runs/{rid}/metrics/keys").json() == []


def test_unknown_run_is_404(client):
    assert error_of(upload(client, "no-such-run", "metrics", b""))[:2] == (404, "not_found")
    assert client.get("/runs/no-such-run/metrics").status_code == 404
