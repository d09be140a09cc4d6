"""
Alerts (issue 22) end to end, on both stores: rules set through the API, a real server whose
evaluator and deliverer run every 0.1 s, and a real webhook receiver on loopback (webhooks.py)
checking bodies, signatures, retries after a 500 and dedupe. Each condition fires once: a
condition that stays true is checked again (a later change of the same run, evaluated before a
sentinel run's alert arrives) without a second delivery; one that clears fires again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from openruns.cli import main as openruns_main

from .. import patience
from ..procs import default_signals
from .helpers import SRC, api, create_run, episode, error_of, metric_rows, ndjson, upload
from .webhooks import Receiver, signature_ok

FAST = {"alert_interval": 0.1, "alert_retry_delay": 0.1}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


def add_rule(client, url: str, condition: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = {"name": fields.pop("name", condition["type"]), "condition": condition}
    body["webhook"] = {"url": url, "format": fields.pop("format", "generic")}
    response = client.post("/alerts/rules", json={**body, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def of_run(run_id: str):
    return lambda r: r["json"]["run"]["id"] == run_id


def fail(client, run_id: str, error: str = "boom") -> None:
    response = client.post(f"/runs/{run_id}/finish", json={"status": "failed", "error": error})
    assert response.status_code == 200, response.text


def settled_deliveries(client, **params: Any) -> list[dict[str, Any]]:
    """The delivery log once no entry is pending: a receiver has the request before the
    deliverer has its answer and records the outcome, so a test that read the log at once
    could still see "pending" (patience.SETTLE at most; the caller's asserts then say what)."""
    deadline = time.monotonic() + patience.SETTLE
    while True:
        listed = client.get("/alerts/deliveries", params=params)
        items: list[dict[str, Any]] = listed.json()["items"]
        if all(d["status"] != "pending" for d in items) or time.monotonic() > deadline:
            return items
        time.sleep(0.05)


def settle(client, receiver: Receiver) -> None:
    """Wait for one evaluation round after everything sent before: a sentinel run fails and its
    alert arrives (the `failed` rule `sentinel_rule` made)."""
    sentinel = create_run(client, name="sentinel", project="sentinel")["id"]
    fail(client, sentinel)
    receiver.wait(1, of_run(sentinel))


def sentinel_rule(client, receiver: Receiver) -> None:
    add_rule(client, receiver.url, {"type": "failed"}, project="sentinel")


def test_rules_crud_and_bad_input(make_server, receiver):
    server = make_server(**FAST)
    with api(server.url) as client:
        rule = add_rule(client, receiver.url, {"type": "silent", "minutes": 30}, project="p")
        assert rule["webhook"]["secret"].startswith("whsec_")
        assert rule["condition"] == {"type": "silent", "minutes": 30}
        assert [r["id"] for r in client.get("/alerts/rules").json()["items"]] == [rule["id"]]
        patched = client.patch(f"/alerts/rules/{rule['id']}", json={"enabled": False}).json()
        assert patched["enabled"] is False and patched["name"] == "silent"
        assert client.get(f"/alerts/rules/{rule['id']}").json() == patched

        ftp = {"url": "ftp://127.0.0.1/x", "format": "chat"}
        response = client.post(
            "/alerts/rules", json={"name": "x", "condition": {"type": "failed"}, "webhook": ftp}
        )
        assert response.status_code in (400, 422)
        assert "http or https" in response.text
        bad = {"type": "threshold", "metric": "loss", "op": "above", "value": 1}
        both = {**bad, "window_points": 3, "window_minutes": 2}
        response = client.post(
            "/alerts/rules",
            json={"name": "x", "condition": both, "webhook": {"url": receiver.url}},
        )
        assert response.status_code in (400, 422) and "not both" in response.text
        response = client.post(
            "/alerts/rules",
            json={
                "name": "x",
                "condition": {"type": "sometimes"},
                "webhook": {"url": receiver.url},
            },
        )
        assert response.status_code in (400, 422) and "condition" in response.text

        assert client.delete(f"/alerts/rules/{rule['id']}").status_code == 204
        status, code, _ = error_of(client.get(f"/alerts/rules/{rule['id']}"))
        assert (status, code) == (404, "not_found")
        assert client.get("/alerts/rules").json()["items"] == []
        # An id past a database integer is refused by name, not an overflow (hypothesis found
        # GET /alerts/rules/9223372036854775808 answered 500 on SQLite).
        huge = 2**63
        for response in (
            client.get(f"/alerts/rules/{huge}"),
            client.patch(f"/alerts/rules/{huge}", json={"enabled": False}),
            client.delete(f"/alerts/rules/{huge}"),
            client.get("/alerts/deliveries", params={"rule_id": huge}),
        ):
            assert 400 <= response.status_code < 500 and "rule_id" in response.text, response.text


def test_a_failed_run_fires_once_signed_with_a_chat_body(make_server, receiver):
    server = make_server(**FAST)
    with api(server.url) as client:
        rule = add_rule(client, receiver.url, {"type": "failed"}, format="chat", name="failures")
        other = add_rule(client, receiver.url, {"type": "failed"}, project="elsewhere")
        run = create_run(client, name="rl-1")
        fail(client, run["id"], "CUDA out of memory")
        got = receiver.wait(1)
        assert len(got) == 1
        request = got[0]
        body = request["json"]
        assert body["text"] == body["content"]
        assert "[error] run failed: rl-1" in body["text"]
        assert "CUDA out of memory" in body["text"] and f"/runs/{run['id']}" in body["text"]
        assert signature_ok(request, rule["webhook"]["secret"])
        assert not signature_ok(request, other["webhook"]["secret"])

        # Still failed after more data: evaluated again, not delivered again.
        upload(client, run["id"], "metrics", metric_rows(range(3), loss=1.0))
        sentinel = create_run(client, name="sentinel")["id"]
        fail(client, sentinel)
        receiver.wait(2)
        assert [r["json"]["text"].count("rl-1") for r in receiver.accepted()] == [1, 0]

        log = settled_deliveries(client, run_id=run["id"])
        assert len(log) == 1
        assert log[0]["status"] == "delivered" and log[0]["attempts"] == 1
        assert log[0]["rule_name"] == "failures" and log[0]["response_status"] == 200
        assert log[0]["event"]["condition"] == "failed"


def test_a_delivery_is_retried_after_a_500(make_server):
    receiver = Receiver(fail_first=2)
    try:
        server = make_server(**FAST)
        with api(server.url) as client:
            add_rule(client, receiver.url, {"type": "failed"})
            run = create_run(client)
            fail(client, run["id"])
            receiver.wait(1)
            requests = receiver.received()
            assert len(requests) == 3
            ids = {r["headers"]["X-Openruns-Delivery"] for r in requests}
            assert len(ids) == 1  # the same delivery, three attempts
            bodies = {r["body"] for r in requests}
            assert len(bodies) == 1
            (log,) = settled_deliveries(client)
            assert (log["status"], log["attempts"]) == ("delivered", 3)
    finally:
        receiver.close()


def test_a_delivery_refused_with_a_4xx_fails_at_once(make_server, receiver):
    server = make_server(**FAST)
    with api(server.url) as client:
        gone = receiver.url.replace("/hook", "/gone")
        add_rule(client, gone, {"type": "failed"}, project="p")
        sentinel_rule(client, receiver)
        run = create_run(client, project="p")
        fail(client, run["id"])
        settle(client, receiver)
        log = settled_deliveries(client, run_id=run["id"])
        assert (log[0]["status"], log[0]["attempts"]) == ("failed", 1)
        assert log[0]["response_status"] == 410 and "HTTP 410" in log[0]["last_error"]
        assert [r["path"] for r in receiver.received()].count("/gone") == 1


def test_silence_fires_clears_and_fires_again(make_server, receiver):
    server = make_server(**FAST)
    with api(server.url) as client:
        add_rule(client, receiver.url, {"type": "silent", "minutes": 0.02})  # 1.2 s
        run = create_run(client, name="quiet")
        first = receiver.wait(1, of_run(run["id"]))
        assert first[0]["json"]["title"] == "run silent"
        assert first[0]["json"]["condition"] == "silent"
        upload(client, run["id"], "metrics", metric_rows(range(2), loss=1.0))  # clears it
        second = receiver.wait(2, of_run(run["id"]))  # then silent again
        assert len(second) == 2
        client.post(f"/runs/{run['id']}/finish", json={"status": "completed"})
        log = client.get("/alerts/deliveries", params={"run_id": run["id"]}).json()["items"]
        assert len(log) == 2


def test_threshold_over_a_window_fires_once_per_crossing(make_server, receiver):
    server = make_server(**FAST)
    with api(server.url) as client:
        sentinel_rule(client, receiver)
        condition = {"type": "threshold", "metric": "loss", "op": "above", "value": 5}
        add_rule(client, receiver.url, {**condition, "window_points": 3, "stat": "mean"})
        run = create_run(client, name="thr")
        is_alert = lambda r: r["json"]["run"]["id"] == run["id"]  # noqa: E731
        upload(client, run["id"], "metrics", metric_rows(range(3), loss=1.0))
        settle(client, receiver)
        assert receiver.accepted() and not [r for r in receiver.accepted() if is_alert(r)]
        upload(client, run["id"], "metrics", metric_rows(range(3, 6), loss=10.0))
        first = receiver.wait(1, is_alert)[0]["json"]
        assert first["title"] == "loss above 5" and first["value"] == 10.0
        assert first["subject"] == "loss"
        upload(client, run["id"], "metrics", metric_rows(range(6, 9), loss=11.0))  # still above
        settle(client, receiver)
        assert len([r for r in receiver.accepted() if is_alert(r)]) == 1
        upload(client, run["id"], "metrics", metric_rows(range(9, 12), loss=0.5))  # clears
        settle(client, receiver)
        upload(client, run["id"], "metrics", metric_rows(range(12, 15), loss=9.0))  # again
        assert len(receiver.wait(2, is_alert)) == 2


def test_error_rate_and_crash_each_fire_once(make_server, receiver):
    server = make_server(heartbeat_timeout=1.0, **FAST)
    with api(server.url) as client:
        sentinel_rule(client, receiver)
        add_rule(client, receiver.url, {"type": "error_rate", "above": 0.25, "min_episodes": 4})
        add_rule(client, receiver.url, {"type": "failed", "statuses": ["crashed"]}, project="c")
        run = create_run(client, name="errs", heartbeat=False)
        is_alert = lambda r: r["json"]["run"]["id"] == run["id"]  # noqa: E731
        ok = [episode(i, 1, 1.0, ok=True) for i in range(3)]
        assert upload(client, run["id"], "episodes", ndjson(ok)).status_code == 200
        settle(client, receiver)
        assert not [r for r in receiver.accepted() if is_alert(r)]
        bad = [episode(i, 2, 0.0, ok=False) for i in range(3)]
        assert upload(client, run["id"], "episodes", ndjson(bad)).status_code == 200
        got = receiver.wait(1, is_alert)[0]["json"]
        assert got["title"] == "episode error rate" and "3 of the newest 6" in got["text"]
        more = [episode(i, 3, 0.0, ok=False) for i in range(2)]
        assert upload(client, run["id"], "episodes", ndjson(more)).status_code == 200
        settle(client, receiver)
        assert len([r for r in receiver.accepted() if is_alert(r)]) == 1

        crashing = create_run(client, name="crashes", project="c")
        crashed = receiver.wait(1, of_run(crashing["id"]))
        assert len(crashed) == 1 and crashed[0]["json"]["title"] == "run crashed"


def test_two_replicas_deliver_each_alert_once(make_server, new_stores):
    stores = new_stores()
    receiver = Receiver()
    try:
        first = make_server(stores, **FAST)
        second = make_server(stores, **FAST)
        with api(first.url) as one, api(second.url) as two:
            add_rule(one, receiver.url, {"type": "failed"})
            runs = [create_run(one if i % 2 else two, name=f"r{i}")["id"] for i in range(6)]
            for i, run_id in enumerate(runs):
                fail(two if i % 2 else one, run_id)
            receiver.wait(len(runs))
            settle(one, receiver)  # a last round on each replica has passed
            settle(two, receiver)
            delivered = [r["json"]["run"]["id"] for r in receiver.accepted()]
            assert sorted(d for d in delivered if d in runs) == sorted(runs)
            assert len(one.get("/alerts/deliveries").json()["items"]) == len(delivered)
    finally:
        receiver.close()


ALERTING = """
import openruns
run = openruns.init(kind="train", name="sdk-alerts", project="sdk")
print(run.id, file=open("run_id", "w"))
run.log_metrics({"loss": 1.0}, step=1)
run.log_metrics({"loss": float("nan"), "acc": 0.5}, step=2)
run.log_metrics({"loss": float("nan")}, step=3)
run.alert("eval regressed", "pass@1 0.41 < 0.52", level="warn")
run.finish()
"""


def test_run_alert_and_a_nan_from_the_sdk(make_server, receiver, tmp_path):
    server = make_server(**FAST)
    with api(server.url) as client:
        rule = add_rule(client, receiver.url, {"type": "nonfinite", "metric": "loss"})
        add_rule(client, receiver.url, {"type": "failed"}, project="other")  # out of scope
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(ALERTING)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": SRC, "OPENRUNS_BASE_URL": server.url},
            capture_output=True,
            text=True,
            timeout=patience.EXIT,
            preexec_fn=default_signals,
        )
        assert done.returncode == 0, done.stderr
        run_id = (tmp_path / "run_id").read_text().strip()
        got = receiver.wait(2, of_run(run_id))
        by_condition = {r["json"]["condition"]: r for r in got}
        assert set(by_condition) == {"nonfinite", "run_alert"}
        nan = by_condition["nonfinite"]["json"]
        assert nan["title"] == "loss is nan" and nan["step"] == 2
        assert nan["rule"]["id"] == rule["id"]
        alert = by_condition["run_alert"]["json"]
        assert (alert["title"], alert["text"], alert["level"]) == (
            "eval regressed",
            "pass@1 0.41 < 0.52",
            "warn",
        )
        assert alert["run"]["project"] == "sdk"
        assert signature_ok(by_condition["run_alert"], rule["webhook"]["secret"])
        log = client.get("/alerts/deliveries", params={"run_id": run_id}).json()["items"]
        assert len(log) == 2  # the second NaN of loss did not fire again


def test_cli_adds_lists_and_removes_rules(make_server, receiver, capsys):
    server = make_server(**FAST)
    base = ["--base-url", server.url]
    add = ["alerts", "add", "loss high", "--on", "threshold", "--metric", "loss", "--above", "5"]
    assert openruns_main([*add, "--window-points", "4", "--webhook", receiver.url, *base]) == 0
    out, err = capsys.readouterr()
    rule_id = int(out.strip())
    assert "whsec_" in err
    assert openruns_main(["alerts", "ls", *base]) == 0
    out, _ = capsys.readouterr()
    assert "loss high" in out and "mean(loss, 4 pts) above 5" in out
    bad = ["alerts", "add", "x", "--on", "silent", "--webhook", receiver.url, *base]
    assert openruns_main(bad) == 2
    assert "--on silent needs --minutes" in capsys.readouterr().err
    with api(server.url) as client:
        run = create_run(client, name="cli")
        upload(client, run["id"], "metrics", metric_rows(range(4), loss=8.0))
        receiver.wait(1)
        settled_deliveries(client)  # the CLI is asked once the outcome is recorded
    assert openruns_main(["alerts", "deliveries", *base]) == 0
    out, _ = capsys.readouterr()
    assert "loss high" in out and run["id"] in out and "delivered" in out
    assert openruns_main(["alerts", "rm", str(rule_id), *base]) == 0
    assert openruns_main(["alerts", "ls", "--json", *base]) == 0
    assert capsys.readouterr().out == ""


def test_rules_belong_to_their_team(make_server, new_stores, receiver, capsys):
    from .helpers import new_key

    stores = new_stores()
    key_a, key_b = new_key(stores, "a", capsys), new_key(stores, "b", capsys)
    server = make_server(stores, auth=True, **FAST)
    with api(server.url, key_a) as a, api(server.url, key_b) as b:
        rule = add_rule(a, receiver.url, {"type": "failed"})
        assert rule["team_id"] == "a"
        assert b.get("/alerts/rules").json()["items"] == []
        assert b.get(f"/alerts/rules/{rule['id']}").status_code == 404
        assert b.delete(f"/alerts/rules/{rule['id']}").status_code == 404
        run = create_run(b)
        with api(server.url, run["token"]) as token:
            status, _, message = error_of(token.get("/alerts/rules"))
            assert status == 403 and "run token" in message
        fail(b, run["id"])  # team b's run: team a's rule does not see it
        run_a = create_run(a)
        fail(a, run_a["id"])
        got = receiver.wait(1)
        assert [r["json"]["run"]["id"] for r in got] == [run_a["id"]]
        assert b.get("/alerts/deliveries").json()["items"] == []


def test_an_offline_runs_alert_is_sent_by_sync(make_server, receiver, tmp_path):
    import openruns

    server = make_server(**FAST)
    run = openruns.init(kind="train", name="offline", mode="offline", dir=tmp_path / "runs")
    run.alert("reward collapsed", "mean reward 0.01", level="error")
    run.finish()
    with api(server.url) as client:
        add_rule(client, receiver.url, {"type": "failed"})
        synced = subprocess.run(
            [sys.executable, "-m", "openruns.cli", "sync", str(tmp_path / "runs")],
            env={**os.environ, "PYTHONPATH": SRC, "OPENRUNS_BASE_URL": server.url},
            capture_output=True,
            text=True,
            timeout=patience.EXIT,
            preexec_fn=default_signals,
        )
        assert synced.returncode == 0, synced.stderr
        (got,) = receiver.wait(1, of_run(run.id))
        assert (got["json"]["title"], got["json"]["level"]) == ("reward collapsed", "error")
