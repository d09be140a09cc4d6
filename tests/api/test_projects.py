"""
The project of every run and a metric's step metric (issue 19), for native runs: `init(project=)`
(default `default`), the API filter and `Client().runs(project=)`, `run.define_metric(name,
step_metric=K)` stored with the metric (online, and offline through `openruns sync`), on both
store configurations.
"""

from __future__ import annotations

import httpx
import pytest

import openruns
from openruns import ConfigurationError
from openruns.api import Client
from openruns.cli import main as openruns_main
from openruns.server import serve_in_thread

from ..patience import REQUEST


@pytest.fixture(scope="module")
def server(backend, stores_factory, tmp_path_factory):
    stores = stores_factory.new(backend, tmp_path_factory.mktemp("projects"))
    handle = serve_in_thread(**stores.settings)
    yield handle
    handle.stop()


def keys(url: str, run_id: str) -> dict[str, str | None]:
    answer = httpx.get(f"{url}/api/v1/runs/{run_id}/metrics/keys", timeout=30)
    assert answer.status_code == 200, answer.text
    return {k["key"]: k["step_metric"] for k in answer.json()}


def test_a_run_has_a_project_filtered_in_the_api_and_the_client(server, tmp_path):
    online = {"base_url": server.url, "dir": tmp_path}
    with openruns.init(kind="train", project="rl-sweep", **online) as in_sweep:
        in_sweep.log_metrics({"loss": 1.0}, step=0)
    with openruns.init(kind="eval", **online) as plain:
        plain.log_metrics({"acc": 1.0}, step=0)
    with Client(base_url=server.url) as client:
        assert client.run(in_sweep.id)["project"] == "rl-sweep"
        assert client.run(plain.id)["project"] == "default"
        assert [r["id"] for r in client.runs(project="rl-sweep")] == [in_sweep.id]
        assert plain.id in {r["id"] for r in client.runs(project="default")}
        assert in_sweep.id not in {r["id"] for r in client.runs(project="default")}
    answer = httpx.post(
        f"{server.url}/api/v1/runs", json={"kind": "eval", "project": "a/b"}, timeout=REQUEST
    )
    assert answer.status_code in (400, 422)
    assert "project" in answer.text


def test_init_refuses_a_project_that_is_not_a_name():
    for bad in ("", "a/b", "x" * 257, 3):
        with pytest.raises(ConfigurationError, match="project"):
            openruns.init(project=bad, mode="disabled")


def test_define_metric_stores_the_step_metric_with_the_metric(server, tmp_path):
    with openruns.init(kind="train", base_url=server.url, dir=tmp_path) as run:
        run.define_metric("eval/acc", step_metric="eval/epoch")
        for step in range(3):
            run.log_metrics({"eval/acc": step / 2, "eval/epoch": step, "loss": 1.0}, step=step)
        run.define_metric("loss", step_metric=None)
    assert keys(server.url, run.id) == {"eval/acc": "eval/epoch", "eval/epoch": None, "loss": None}
    with pytest.raises(ValueError, match="step_metric"):
        run.define_metric("x", step_metric="")


def test_an_offline_runs_step_metrics_come_with_openruns_sync(server, tmp_path):
    with openruns.init(kind="train", mode="offline", dir=tmp_path, project="later") as run:
        run.define_metric("reward", step_metric="env_steps")
        run.log_metrics({"reward": 1.0, "env_steps": 64}, step=0)
    assert openruns_main(["sync", str(tmp_path), "--base-url", server.url]) == 0
    assert keys(server.url, run.id)["reward"] == "env_steps"
    with Client(base_url=server.url) as client:
        assert client.run(run.id)["project"] == "later"
