"""
The Prime path's leftovers (issue 20), with the real prime-runs 0.1.4 SDK in its own process
(and `import openruns as pr` in this one) against a real server: rows without a step, an eval
closed elsewhere, `run.url`, prime-rl's hosted base URLs.
"""

from __future__ import annotations

import httpx
import pytest

import openruns

from .helpers import assert_clean, run_sdk


def test_metric_rows_without_a_step_are_time_keyed_rows(server, client, tmp_path):
    # prime-rl logs inference/* and event_loop_lag/* every few seconds with step=None.
    report, stderr = run_sdk(
        """
        run = pr.init(kind="train", model="m", team_id="default")
        run.log_metrics({"loss": 0.5}, step=1)
        for i in range(3):
            run.log_metrics({"inference/queue": float(i), "_timestamp": 1000.0 + i})
        run.finish()
        report(run)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    read = _api(server, "GET", f"/runs/{report['id']}/metrics", params={"max_points": 0})
    assert read["series"]["loss"]["step"] == [1]
    assert "inference/queue" not in read["series"]  # never folded into a step
    queue = read["time"]["inference/queue"]
    assert (queue["ts"], queue["value"]) == ([1000.0, 1001.0, 1002.0], [0.0, 1.0, 2.0])


@pytest.mark.parametrize("closed_as", ["completed", "cancelled"])
def test_an_eval_closed_elsewhere_takes_the_sdks_update_without_an_error(
    server, client, tmp_path, closed_as
):
    report, stderr = run_sdk(
        f"""
        import httpx, os
        run = pr.init(environments=["gsm8k"], model="m", config={{"c": 1}})
        run.log_episodes([episode(0)])
        run.flush()
        base = os.environ["PRIME_API_BASE_URL"]  # another process closes it first
        closing = {{"status": "{closed_as}"}}
        httpx.post(f"{{base}}/api/v1/runs/{{run.id}}/finish", json=closing, timeout=60)
        if "{closed_as}" == "completed":
            run.finish({{"accuracy": 0.5}})
        else:
            run.finish({{"accuracy": 0.5}}, status="cancelled", error="interrupted")
        report(run)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)  # no 409 recorded, no warning at finish
    run = client.run(report["id"])
    assert run["status"] == closed_as  # the status that was set first stands
    assert run["summary"]["accuracy"] == 0.5  # its metrics were taken all the same
    assert '"c": 1' in run["config"]["text"]


def test_run_url_of_a_training_run_and_an_attached_eval_opens_the_run_page(
    server, client, tmp_path
):
    eval_id = _api(server, "POST", "/runs", json={"kind": "eval"})["id"]
    report, stderr = run_sdk(
        f"""
        train = pr.init(kind="train", model="m", team_id="default")
        train.finish()
        attached = pr.init(id={eval_id!r})  # an eval another process created
        attached.finish()
        report(train, urls={{"train": [train.id, train.url], "eval": [attached.id, attached.url]}})
        """,
        tmp_path,
        server.url,
        PRIME_FRONTEND_URL=server.url,  # where prime-runs points run.url
    )
    assert_clean(report, stderr)
    urls = report["urls"]
    for kind, page in (("train", "training"), ("eval", "evaluations")):
        run_id, url = urls[kind]
        assert url == f"{server.url}/dashboard/{page}/{run_id}"
        opened = httpx.get(url, follow_redirects=True, timeout=30)
        assert opened.status_code == 200 and opened.url.path == f"/runs/{run_id}"
        assert "text/html" in opened.headers["content-type"]
    unknown = httpx.get(f"{server.url}/dashboard/training/..%2Fevil", timeout=30)
    assert unknown.status_code == 404


def _api(server, method: str, path: str, **kwargs) -> dict:
    response = httpx.request(method, f"{server.url}/api/v1{path}", timeout=30, **kwargs)
    return response.raise_for_status().json()


@pytest.mark.parametrize("root", ["/api/internal", "/api/internal/rft", "/api/v1/rft", "/api/v1"])
def test_openruns_as_pr_takes_prime_rls_hosted_base_urls(server, client, tmp_path, root):
    # prime-rl passes $PRIME_API_BASE minus /rft (the internal root a hosted run gets).
    run = openruns.init(
        kind="train", base_url=server.url + root, dir=tmp_path, system_metrics_interval=0
    )
    run.log_metrics({"loss": 1.0}, step=0)
    run.log_episodes([{"id": "ep-0", "traces": []}], step=0)
    run.finish()
    assert (run.errors, run.failed_records, run.spooled_records) == ([], {}, 0)
    assert run.url == f"{server.url}/runs/{run.id}"
    assert client.run(run.id)["status"] == "completed"
    assert [e["id"] for e in client.episodes(run.id)] == ["ep-0"]
