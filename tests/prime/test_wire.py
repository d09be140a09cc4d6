"""
The Prime wire route by route over HTTP, against real `openruns server` processes: the status
codes prime-runs relies on (reference b.5), replays that change nothing, the presigned PUT,
the Prime Traces upload's checks, teams and keys, and overload as 429/503 with Retry-After.
"""

from __future__ import annotations

import gzip
import hashlib
import time

import httpx
import orjson
import pytest

from openruns.server import ServerSettings
from openruns.server.prime.objects import _signature
from openruns.server.store import Store
from openruns.server.store import keys as key_sql
from tests.server.helpers import ServerProcess

from .helpers import assert_clean, run_sdk


def _api(url: str, key: str | None = None, prefix: str = "/api/v1", header: str = "bearer"):
    headers = {}
    if key and header == "bearer":
        headers["Authorization"] = f"Bearer {key}"
    elif key:
        headers["x-api-key"] = key
    return httpx.Client(base_url=url + prefix, headers=headers, timeout=30)


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, dict)
    return body


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    return f"{error['code']}: {error['message']}"


def _eval(http: httpx.Client, **extra) -> str:
    env = _ok(http.post("/environmentshub/resolve", json={"name": "gsm8k"}))["data"]["id"]
    body = {"name": "e", "environments": [{"id": env}], "tags": [], **extra}
    return _ok(http.post("/evaluations/", json=body), 201)["evaluation_id"]


def _train(http: httpx.Client, team: str = "default") -> str:
    body = {"base_model": "m", "max_steps": 0, "environments": [], "team_id": team}
    return _ok(http.post("/rft/external-runs", json=body), 201)["run"]["id"]


def _traces(
    http: httpx.Client, lines: list[dict], line_format: str | None = "episode", key: str = "auto"
) -> httpx.Response:
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    headers = {"Idempotency-Key": f"sha256:{hashlib.sha256(data).hexdigest()}"}
    if key != "auto":
        headers["Idempotency-Key"] = key
    if line_format:
        headers["X-Prime-Line-Format"] = line_format
    files = {
        "metadata": (None, b'{"schema_version":1,"context":{"source":"test"}}', "application/json"),
        "traces": (
            "traces.jsonl",
            gzip.compress(data, mtime=0),
            "application/x-ndjson",
            {"Content-Encoding": "gzip"},
        ),
    }
    return http.post("/traces", files=files, headers=headers)


def _episode(run_id: str, i: int) -> dict:
    return {"id": f"ep-{i}", "run": {"id": run_id, "type": "eval"}, "traces": [{"reward": 1.0}]}


# -- environments and eval runs ------------------------------------------------------------------


def test_environments_resolve_to_the_same_id_and_slugs_are_created(server):
    with _api(server.url) as http:
        first = _ok(http.post("/environmentshub/resolve", json={"name": "gsm8k"}))["data"]
        again = _ok(http.post("/environmentshub/resolve", json={"name": "gsm8k"}))["data"]
        assert first["id"] == again["id"] and first["name"] == "gsm8k"
        slug = _ok(http.get("/environmentshub/alice/math/@latest"))["data"]
        assert slug["slug"] == "alice/math" and slug["id"] != first["id"]
        _error(http.post("/environmentshub/resolve", json={"name": ""}), 422)


def test_an_eval_closes_once_and_a_repeated_finalize_is_a_success(server):
    with _api(server.url) as http:
        run_id = _eval(http, metadata={"config_source": {"format": "toml", "text": "a = 1\n"}})
        run = _ok(http.get(f"/runs/{run_id}"))
        assert run["config"] == {"format": "toml", "text": "a = 1\n"}
        assert run["last_heartbeat_at"] is None  # Prime runs are never crashed for silence
        _ok(http.put(f"/evaluations/{run_id}", json={"metadata": {"b": 2}, "metrics": {"x": 1}}))
        _ok(http.post(f"/evaluations/{run_id}/finalize", json={"metrics": {"y": 2}}))
        again = _ok(http.post(f"/evaluations/{run_id}/finalize", json={"metrics": {}}))
        assert again["status"] == "COMPLETED"
        run = _ok(http.get(f"/runs/{run_id}"))
        assert run["summary"] == {"x": 1, "y": 2} and '"b": 2' in run["config"]["text"]
        closed = http.put(f"/evaluations/{run_id}", json={"status": "FAILED"})
        assert _error(closed, 409).startswith("run_closed")
        # Only status changes are guarded: metadata and metrics of a closed eval are taken
        # (prime-runs closing an eval closed elsewhere still sends them; issue 20).
        _ok(http.put(f"/evaluations/{run_id}", json={"metrics": {"z": 3}}))
        run = _ok(http.get(f"/runs/{run_id}"))
        assert (run["status"], run["summary"]) == ("completed", {"x": 1, "y": 2, "z": 3})

        crashed = _eval(http)
        body = {"status": "FAILED", "error_message": "crashed: process exited"}
        assert _ok(http.put(f"/evaluations/{crashed}", json=body))["status"] == "CRASHED"
        assert _ok(http.get(f"/runs/{crashed}"))["error"] == "process exited"
        _error(http.post(f"/evaluations/{crashed}/finalize", json={}), 409)
        _error(http.put(f"/evaluations/{_eval(http)}", json={"status": "RUNNING"}), 400)
        _error(http.put("/evaluations/no-such-run", json={"status": "FAILED"}), 404)


def test_eval_sample_rows_are_kept_once_per_request(server):
    with _api(server.url) as http:
        run_id = _eval(http)
        row = {"sample_id": "s1", "info": {"native_wrapper": {"id": "ep-1", "traces": []}}}
        body = {"samples": [row, {"sample_id": "s2"}]}
        for _ in range(2):  # the same bytes twice: kept once
            pushed = _ok(http.post(f"/evaluations/{run_id}/samples", json=body))
            assert pushed["samples_pushed"] == 2
        rows = http.get(f"/runs/{run_id}/prime/eval-samples").content.splitlines()
        assert [orjson.loads(r) for r in rows] == body["samples"]
        episode = _ok(http.get(f"/runs/{run_id}/episodes/ep-1"))
        assert episode == {"id": "ep-1", "traces": [], "run": {"id": run_id, "type": "eval"}}
        _error(http.post(f"/evaluations/{run_id}/samples", content=b"[1]"), 400)
        _error(http.post(f"/evaluations/{run_id}/samples", json={"samples": [1]}), 400)


# -- training runs -----------------------------------------------------------------------------


def test_metrics_rows_merge_per_step_and_a_replay_changes_nothing(server):
    with _api(server.url) as http:
        run_id = _train(http)
        first = {"run_id": run_id, "metrics": {"loss": 1.0, "step": 2, "_timestamp": 5.0}}
        later = {"run_id": run_id, "metrics": {"loss": 2.0, "step": 2, "_timestamp": 6.0}}
        _ok(http.post("/rft/metrics", json=first))
        _ok(http.post("/rft/metrics", json=later))
        _ok(http.post("/rft/metrics", json=first))  # a late replay of the first row
        no_step = {"run_id": run_id, "metrics": {"lag": 0.5, "note": "text", "_timestamp": 7.0}}
        assert _ok(http.post("/rft/metrics", json=no_step))["data"]["ignored"] == ["note"]
        later_lag = {"run_id": run_id, "metrics": {"lag": 0.25, "_timestamp": 8.0}}
        _ok(http.post("/rft/metrics", json=later_lag))
        read = _ok(http.get(f"/runs/{run_id}/metrics", params={"max_points": 0}))
        series = read["series"]
        assert series["loss"]["step"] == [2] and series["loss"]["value"] == [2.0]
        # Rows without a step are keyed by their time, each kept (issue 20), never a step's.
        assert "lag" not in series
        lag = read["time"]["lag"]
        assert (lag["ts"], lag["value"]) == ([7.0, 8.0], [0.5, 0.25])
        bad = {"run_id": run_id, "metrics": {"step": -1}}
        assert _error(http.post("/rft/metrics", json=bad), 400).startswith("invalid_step")
        _error(http.post("/rft/metrics", json={"run_id": "nope", "metrics": {}}), 404)


def test_finalize_is_compare_and_set_and_status_is_409_once_closed(server):
    with _api(server.url) as http:
        run_id = _train(http)
        for _ in range(2):
            _ok(http.post("/rft/finalize", json={"run_id": run_id, "exit_code": 0}))
        closed = http.put(f"/rft/external-runs/{run_id}/status", json={"status": "completed"})
        _error(closed, 409)
        failed = _train(http)
        body = {"status": "failed", "error_message": "cancelled: interrupted"}
        assert _ok(http.put(f"/rft/external-runs/{failed}/status", json=body))["run"] == {
            "id": failed,
            "status": "cancelled",
        }
        _error(http.post("/rft/finalize", json={"run_id": failed, "exit_code": 0}), 409)
        code = _train(http)
        _ok(http.post("/rft/finalize", json={"run_id": code, "exit_code": 3}))
        run = _ok(http.get(f"/runs/{code}"))
        assert (run["status"], run["error"]) == (
            "failed",
            "the training process exited with code 3",
        )


def test_the_presigned_put_takes_a_parquet_body_without_credentials(server):
    store = Store.open(ServerSettings(data_dir=server.data_dir).sqlalchemy_url())
    secret = store.secret
    store.close()
    with _api(server.url) as http:
        run_id = _train(http)
        presign = _ok(http.post("/rft/samples/presign", json={"run_id": run_id, "step": 10}))
        url, key = presign["data"]["presignedUrl"], presign["data"]["s3Key"]
        assert presign["data"]["expiresIn"] == 900
        confirm = {"run_id": run_id, "step": 10, "s3_key": key}
        assert _error(http.post("/rft/samples/confirm", json=confirm), 400).startswith(
            "object_missing"
        )
        bare = httpx.Client(timeout=30)
        _error(bare.put(url, content=b"not parquet"), 400)
        _error(bare.put(url.replace("signature=", "signature=0"), content=b"PAR1....PAR1"), 403)
        past = int(time.time()) - 1
        expired = url.split("?")[0] + f"?expires={past}&signature={_signature(secret, key, past)}"
        assert _error(bare.put(expired, content=b"PAR1....PAR1"), 403).startswith("expired")
        table = _parquet()
        assert _ok(bare.put(url, content=table))["bytes"] == len(table)
        other = {"run_id": run_id, "step": 20, "s3_key": key}
        _error(http.post("/rft/samples/confirm", json=other), 400)
        for _ in range(2):  # a replayed confirm is a success and registers the object once
            assert _ok(http.post("/rft/samples/confirm", json=confirm))["data"]["rows"] == 1
        items = _ok(http.get(f"/runs/{run_id}/prime/train-samples"))["items"]
        assert [(i["step"], i["bytes"]) for i in items] == [(10, len(table))]
        assert http.get(server.url + items[0]["url"]).content == table
        bare.close()


def _parquet() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"info": ['{"native_wrapper": {"id": "p1", "traces": []}}']}), out)
    return out.getvalue()


# -- Prime Traces ------------------------------------------------------------------------------


def test_a_traces_batch_is_stored_once_and_its_replay_gets_the_same_receipt(server):
    with _api(server.url) as http:
        run_id = _eval(http)
        lines = [_episode(run_id, i) for i in range(3)]
        first = _ok(_traces(http, lines), 201)
        assert first["status"] == "committed" and len(first["upload_id"]) == 64
        assert _ok(_traces(http, lines), 201) == first
        assert len(_ok(http.get(f"/runs/{run_id}/episodes"))["items"]) == 3
        conflict = _traces(http, lines, line_format=None)
        assert _error(conflict, 409).startswith("line_format_conflict")
        wrong = _traces(http, lines[:1], key="sha256:" + "0" * 64)
        assert _error(wrong, 400).startswith("digest_mismatch")
        no_run = _traces(http, [{"id": "x", "traces": []}])
        assert _error(no_run, 400).startswith("invalid_trace")
        _error(_traces(http, lines, line_format="span"), 400)
        _error(http.post("/traces", content=b"{}", headers={"Content-Type": "text/plain"}), 400)
        _error(_traces(http, [_episode("no-such-run", 9)]), 404)


def test_bare_traces_and_a_batch_spanning_two_runs(server):
    with _api(server.url) as http:
        a, b = _eval(http), _eval(http)
        lines = [{"id": "t-a", "run": {"id": a}}, {"id": "t-b", "run": {"id": b}}]
        receipt = _ok(_traces(http, lines, line_format=None), 201)
        assert receipt["runs"] == sorted([a, b]) and receipt["line_format"] == "trace"
        for run_id, trace_id in ((a, "t-a"), (b, "t-b")):
            page = _ok(http.get(f"/runs/{run_id}/episodes", params={"stream": "traces"}))
            assert [row["id"] for row in page["items"]] == [trace_id]


# -- teams and keys ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("prime-auth") / "data"
    store = Store.open(ServerSettings(data_dir=data).sqlalchemy_url())
    keys = {team: store.db.write_sync(key_sql.create_key, team)[1] for team in ("ml", "evals")}
    store.close()
    proc = ServerProcess(data, "--auth", "--prime-training-teams", "ml").start()
    yield proc, keys
    proc.stop()


def test_a_team_key_is_the_api_key_and_team_rules_hold(auth_server):
    server, keys = auth_server
    with _api(server.url, keys["ml"]) as ml, _api(server.url, keys["evals"]) as evals:
        with _api(server.url) as anonymous:
            _error(anonymous.post("/rft/external-runs", json={}), 401)
        run_id = _train(ml, team="ml")
        mismatch = ml.post(
            "/rft/external-runs",
            json={"base_model": "m", "team_id": "other", "environments": []},
        )
        assert "set PRIME_TEAM_ID=ml" in _error(mismatch, 403)
        refused = evals.post("/rft/external-runs", json={"base_model": "m", "team_id": "evals"})
        assert "not enabled for team 'evals'" in _error(refused, 403)
        _eval(evals)  # evals need no allowlist
        # Another team's run is not there for this key.
        _error(evals.post("/rft/metrics", json={"run_id": run_id, "metrics": {"a": 1}}), 404)
        # The internal root takes the same key in x-api-key.
        with _api(server.url, keys["ml"], "/api/internal", header="x-api-key") as internal:
            _ok(internal.post("/rft/metrics", json={"run_id": run_id, "metrics": {"a": 1}}))
            _ok(internal.post("/rft/finalize", json={"run_id": run_id}))
        assert _ok(ml.get(f"/runs/{run_id}"))["status"] == "completed"


def test_the_real_sdk_with_a_team_key_and_a_refused_team(auth_server, tmp_path):
    server, keys = auth_server
    report, stderr = run_sdk(
        """
        run = pr.init(kind="train", model="m", team_id="ml")
        run.log_metrics({"loss": 1.0}, step=0)
        run.finish()
        report(run)
        """,
        tmp_path,
        server.url,
        api_key=keys["ml"],
    )
    assert_clean(report, stderr)
    report, _ = run_sdk(
        """
        try:
            pr.init(kind="train", model="m", team_id="evals")
        except pr.ForbiddenError as exc:
            print(json.dumps({"refused": str(exc), "status": exc.status_code}))
        """,
        tmp_path,
        server.url,
        api_key=keys["evals"],
    )
    assert report["status"] == 403 and "not enabled for team 'evals'" in report["refused"]


# -- overload ----------------------------------------------------------------------------------


def test_overload_is_429_or_503_with_retry_after_never_500(tmp_path):
    data = tmp_path / "data"
    store = Store.open(ServerSettings(data_dir=data).sqlalchemy_url())
    key = store.db.write_sync(key_sql.create_key, "t")[1]
    store.close()
    busy = ServerProcess(
        data, "--auth", "--max-ingest-requests", "0", "--rate-limit", "0.01", "--rate-burst", "3"
    ).start()
    try:
        with _api(busy.url, key) as http:
            run_id = _eval(http)  # two requests of the burst of three
            full = _traces(http, [_episode(run_id, 0)])  # the third: no ingest slot
            assert _error(full, 503).startswith("overloaded") and full.headers["Retry-After"]
            limited = http.post("/rft/metrics", json={"run_id": run_id, "metrics": {}})
            assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    finally:
        busy.stop()


def test_numbers_json_allows_but_a_float_cannot_hold_are_refused_or_ignored(server):
    with _api(server.url) as http:
        run_id = _train(http)
        row = b'{"run_id": "%s", "metrics": {"step": 1, "big": 1%s, "nan": NaN, "ok": 2}}' % (
            run_id.encode(),
            b"0" * 400,
        )
        headers = {"Content-Type": "application/json"}
        answer = _ok(http.post("/rft/metrics", content=row, headers=headers))
        assert answer["data"]["ignored"] == ["big", "nan"]
        series = _ok(http.get(f"/runs/{run_id}/metrics", params={"max_points": 0}))["series"]
        assert list(series) == ["ok"]
        env = _ok(http.post("/environmentshub/resolve", json={"name": "gsm8k"}))["data"]["id"]
        create = b'{"environments": [{"id": "%s"}], "metadata": {"n": 1%s}}' % (
            env.encode(),
            b"0" * 30,
        )
        assert _error(http.post("/evaluations/", content=create, headers=headers), 400).startswith(
            "invalid_config"
        )
