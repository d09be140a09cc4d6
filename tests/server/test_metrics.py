"""Metrics over HTTP: ingest in every encoding, merge, replay, reads, bad rows."""

from __future__ import annotations

import pytest

from openruns.rundir import batch_key

from .helpers import api, create_run, error_of, metric_rows, upload


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "identity"])
def test_ingest_then_read_back_exactly(client, encoding):
    rid = create_run(client)["id"]
    data = metric_rows(range(300), loss=lambda s: 1.0 / (s + 1), step_time=2)
    response = upload(client, rid, "metrics", data, encoding)
    assert response.status_code == 200
    assert response.json() == {"status": "committed", "rows": 300, "receipt": batch_key(data)}
    keys = client.get(f"/runs/{rid}/metrics/keys").json()
    assert keys == [
        {"key": k, "label": k, "axis": "step", "last_step": 299, "last_ts": None}
        | {"last_value": v, "count": 300, "step_metric": None}
        for k, v in (("loss", 1.0 / 300), ("step_time", 2.0))
    ]
    series = client.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()
    assert series["downsampled"] is False and series["time"] == {}
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
    # The same key and body: the first receipt, and nothing is written.
    replay = upload(client, rid, "metrics", first, key=batch_key(first))
    assert replay.json() == {"status": "committed", "rows": 10, "receipt": batch_key(first)}
    # The same key with another body: refused (422 naming the key), nothing written.
    reused = upload(client, rid, "metrics", metric_rows(range(20), loss=9.0), key=batch_key(first))
    assert reused.status_code == 422, reused.text
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert batch_key(first) in reused.json()["error"]["message"]
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


def test_rows_without_a_step_are_kept_with_their_times(client):
    rid = create_run(client)["id"]
    upload(client, rid, "metrics", metric_rows(range(3), loss=1.0))
    timed = b"".join(
        b'{"step": null, "ts": %d.5, "values": {"inference/queue": %d, "loss": 9}}\n' % (t, t)
        for t in (100, 105, 110)
    )
    assert upload(client, rid, "metrics", timed).json()["rows"] == 3
    body = client.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()
    # The step-keyed loss is untouched by the time-keyed rows of the same name.
    assert body["series"]["loss"] == {"step": [0, 1, 2], "value": [1.0] * 3,
                                      "min": [1.0] * 3, "max": [1.0] * 3}  # fmt: skip
    assert "inference/queue" not in body["series"]
    assert body["time"]["inference/queue"]["ts"] == [100.5, 105.5, 110.5]
    assert body["time"]["inference/queue"]["value"] == [100.0, 105.0, 110.0]
    assert body["time"]["loss"]["value"] == [9.0] * 3
    window = client.get(f"/runs/{rid}/metrics", params={"ts_min": 104, "ts_max": 106}).json()
    assert window["time"]["inference/queue"]["ts"] == [105.5]
    keys = {(k["key"], k["axis"]): k for k in client.get(f"/runs/{rid}/metrics/keys").json()}
    queue = keys[("inference/queue", "time")]
    assert (queue["last_ts"], queue["last_value"], queue["count"]) == (110.5, 110.0, 3)
    assert keys[("loss", "step")]["last_step"] == 2 and ("loss", "time") in keys
    # Logged both ways, the key is listed twice, told apart by label (issue 24).
    assert (keys[("loss", "step")]["label"], keys[("loss", "time")]["label"]) == (
        "loss",
        "loss (by time)",
    )
    assert keys[("inference/queue", "time")]["label"] == "inference/queue"  # only one way
    # A replay of the time-keyed batch changes nothing; a later row at the same ts replaces.
    upload(client, rid, "metrics", timed)
    upload(client, rid, "metrics", b'{"step": null, "ts": 105.5, "values": {"loss": 1}}\n')
    again = client.get(f"/runs/{rid}/metrics", params={"keys": "loss"}).json()["time"]["loss"]
    assert again["value"] == [9.0, 1.0, 9.0]
    many = b"".join(
        b'{"step": null, "ts": %d, "values": {"lag": %d}}\n' % (t, 50 if t == 777 else 1)
        for t in range(1000)
    )
    upload(client, rid, "metrics", many)
    lag = client.get(f"/runs/{rid}/metrics", params={"keys": "lag", "max_points": 10}).json()
    assert lag["downsampled"] and len(lag["time"]["lag"]["ts"]) <= 10
    assert max(lag["time"]["lag"]["max"]) == 50.0 and lag["time"]["lag"]["ts"][-1] == 999.0


def test_eval_and_train_metrics_of_one_step_stay_apart(client):
    rid = create_run(client)["id"]
    rows = b'{"step": 5, "values": {"reward/mean": 0.2, "eval/gsm8k/reward/mean": 0.7}}\n'
    upload(client, rid, "metrics", rows)
    train = client.get(f"/runs/{rid}/metrics", params={"kind": "train"}).json()["series"]
    evals = client.get(f"/runs/{rid}/metrics", params={"kind": "eval"}).json()["series"]
    assert train == {"reward/mean": {"step": [5], "value": [0.2], "min": [0.2], "max": [0.2]}}
    assert list(evals) == ["eval/gsm8k/reward/mean"] and evals["eval/gsm8k/reward/mean"][
        "value"
    ] == [0.7]


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
        (b'{"step": null, "values": {"a": 1}}', "line 2: a row without a step is keyed by its"),
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


def test_block_summaries_stay_right_across_rewrites_and_appends_of_several_runs(client):
    """Every downsampled bucket (count, min, max, last) and every key's latest value agree
    with the points as written, after rewrites inside blocks and appends past them, in two
    runs whose keys share names (each run's blocks are its own)."""
    runs = {name: create_run(client)["id"] for name in ("a", "b")}
    model: dict[str, dict[str, dict[int, float]]] = {name: {} for name in runs}

    def write(name: str, steps: range, **values) -> None:
        data = metric_rows(steps, **values)
        assert upload(client, runs[name], "metrics", data).status_code == 200
        for step in steps:
            for key, value in values.items():
                model[name].setdefault(key, {})[step] = value(step) if callable(value) else value

    def check() -> None:
        for name, rid in runs.items():
            keys = {k["key"]: k for k in client.get(f"/runs/{rid}/metrics/keys").json()}
            assert set(keys) == set(model[name])
            for key, points in model[name].items():
                last = max(points)
                assert (keys[key]["last_step"], keys[key]["last_value"]) == (last, points[last])
                assert keys[key]["count"] == len(points)
                for lo, hi, max_points in ((0, 10**6, 7), (0, 10**6, 60), (900, 5100, 9)):
                    series = client.get(
                        f"/runs/{rid}/metrics",
                        params={
                            "keys": key,
                            "step_min": lo,
                            "step_max": hi,
                            "max_points": max_points,
                        },
                    ).json()["series"][key]
                    inside = sorted(s for s in points if lo <= s <= hi)
                    assert series["step"][-1] == inside[-1] and len(series["step"]) <= max_points
                    start = lo - 1
                    for step, value, low, high in zip(
                        series["step"], series["value"], series["min"], series["max"], strict=True
                    ):  # each bucket covers the steps after the one before, up to its own
                        bucket = [points[s] for s in inside if start < s <= step]
                        assert (value, low, high) == (points[step], min(bucket), max(bucket))
                        start = step

    write("a", range(5000), loss=lambda s: s % 97 / 10, acc=lambda s: s / 10_000)
    write("b", range(3000), loss=lambda s: -(s % 89) / 10)
    check()
    write("a", range(1000, 1100), loss=lambda s: -1000.0 - s)  # rewrites inside blocks
    write("a", range(4990, 10_000), loss=lambda s: 5000.0 - s)  # rewrites, then appends
    write("a", range(7000, 7001), acc=123.0)  # one point past the key's last block
    write("b", range(2990, 3500), loss=lambda s: s * 1.5)
    check()


def test_several_runs_are_read_at_once_as_each_alone(client):
    """GET /metrics (the compare page's read): each run's answer is its own read's, exactly."""
    ids = []
    for n in range(3):
        rid = create_run(client)["id"]
        rows = metric_rows(range(50 * (n + 1)), loss=lambda s, n=n: n + 1.0 / (s + 1), acc=0.5)
        assert upload(client, rid, "metrics", rows).status_code == 200
        ids.append(rid)
    params = {"keys": "loss,nope", "max_points": 40}
    both = client.get("/metrics", params={**params, "runs": ",".join(ids)})
    assert both.status_code == 200, both.text
    answers = both.json()["runs"]
    assert list(answers) == ids
    for rid in ids:
        alone = client.get(f"/runs/{rid}/metrics", params=params).json()
        assert answers[rid] == alone and list(alone["series"]) == ["loss"]
    assert [answers[rid]["downsampled"] for rid in ids] == [True, True, True]
    # What cannot be answered is a 4xx that says so; nothing is read.
    status, code, message = error_of(client.get("/metrics", params={**params, "runs": "nope"}))
    assert status == 404 and "nope" in message, (code, message)
    status, code, _ = error_of(client.get("/metrics", params={"runs": ids[0], "keys": ","}))
    assert (status, code) == (400, "empty_read")
    many = {"runs": ",".join(ids), "keys": ",".join(f"k{i}" for i in range(200))}
    status, code, message = error_of(client.get("/metrics", params=many))
    assert (status, code) == (400, "too_many_keys") and "3 runs x 200 keys" in message
    status, code, _ = error_of(
        client.get("/metrics", params={**params, "runs": ",".join(f"r{i}" for i in range(101))})
    )
    assert (status, code) == (400, "too_many_runs")


def test_a_read_of_several_runs_refuses_another_teams_run(teams):
    """GET /metrics and GET /metrics/keys: a run of another team fails the read, named."""
    server, keys, _ = teams
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        mine, theirs = create_run(red)["id"], create_run(blue)["id"]
        upload(red, mine, "metrics", metric_rows(range(3), loss=1.0))
        answer = red.get("/metrics", params={"runs": f"{mine},{theirs}", "keys": "loss"})
        status, _, message = error_of(answer)
        assert status == 404 and theirs in message
        assert red.get("/metrics", params={"runs": mine, "keys": "loss"}).status_code == 200
        # So does the read of several runs' keys.
        status, _, message = error_of(red.get("/metrics/keys", params={"runs": f"{mine},{theirs}"}))
        assert status == 404 and theirs in message
        assert red.get("/metrics/keys", params={"runs": mine}).status_code == 200
