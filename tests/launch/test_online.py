"""`openruns run` against a real server on loopback: the children get the per-run token."""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from openruns.cli import main as openruns_main

from .helpers import openruns_cli, script

pytest.importorskip("fastapi", reason="the server extra is needed to serve the run")

CHILD = """
import json, os, sys, openruns
run = openruns.init()
print(json.dumps({"attached": run.attached, "mode": run.mode, "id": run.id,
                  "key": os.environ["OPENRUNS_API_KEY"]}))
run.log_metrics({"loss": 0.25}, step=4)
run.log_episodes([{"id": "e1", "traces": [{"reward": 1.0}]}], step=4)
run.finish()
sys.exit(3)
"""


@pytest.fixture
def auth_server(tmp_path, capsys):
    from openruns.server import serve_in_thread

    data = tmp_path / "server-data"
    assert openruns_main(["keys", "create", "--team", "research", "--data-dir", str(data)]) == 0
    key = capsys.readouterr().out.strip()
    handle = serve_in_thread(data_dir=data, auth=True)
    yield handle.url, key
    handle.stop()


def test_online_run_children_attach_with_the_run_token(tmp_path, auth_server):
    url, key = auth_server
    child = script(tmp_path, "child.py", CHILD)
    proc = openruns_cli(
        "run", "--mode", "online", "--name", "online-job", "--", sys.executable, child,
        cwd=tmp_path,
        env={"OPENRUNS_BASE_URL": url, "OPENRUNS_API_KEY": key, "OPENRUNS_DIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["attached"] and seen["mode"] == "online"
    assert seen["key"].startswith("orr_") and seen["key"] != key  # this run's token, not the key
    with httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {key}"}) as api:
        doc = api.get(f"/runs/{seen['id']}").raise_for_status().json()
        assert (doc["name"], doc["status"]) == ("online-job", "failed")
        assert doc["error"] == "RuntimeError: The job step exited with code 3"
        episodes = api.get(f"/runs/{seen['id']}/episodes").raise_for_status().json()
        assert [e["id"] for e in episodes["items"]] == ["e1"]
