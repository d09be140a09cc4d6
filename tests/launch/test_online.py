"""`openruns run` against a real server on loopback: the children get the per-run token."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from openruns.cli import main as openruns_main

from .. import patience
from .helpers import cli_env, openruns_cli, script

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


OFFLINE_PRINTER = """
import openruns
run = openruns.init(mode="offline", dir="off")
print("offline line")
run.finish()
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
    with httpx.Client(
        base_url=url + "/api/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=patience.REQUEST,
    ) as api:
        doc = api.get(f"/runs/{seen['id']}").raise_for_status().json()
        assert (doc["name"], doc["status"]) == ("online-job", "failed")
        assert doc["error"] == "the command exited with code 3"
        episodes = api.get(f"/runs/{seen['id']}/episodes").raise_for_status().json()
        assert [e["id"] for e in episodes["items"]] == ["e1"]


NAMING_CHILD = """
import openruns
run = openruns.init(name="named-by-the-trainer", tags=["rl"], config={"lr": 0.5})
raise RuntimeError("boom")
"""


def test_online_a_child_names_the_run_and_its_exception_is_the_error(tmp_path, auth_server):
    url, key = auth_server
    child = script(tmp_path, "trainer.py", NAMING_CHILD)
    proc = openruns_cli(
        "run", "--mode", "online", "--", sys.executable, child,
        cwd=tmp_path,
        env={"OPENRUNS_BASE_URL": url, "OPENRUNS_API_KEY": key, "OPENRUNS_DIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    with httpx.Client(
        base_url=url + "/api/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=patience.REQUEST,
    ) as api:
        doc = api.get("/runs").raise_for_status().json()["items"][0]
    assert (doc["name"], doc["tags"], json.loads(doc["config"]["text"])) == (
        "named-by-the-trainer",
        ["rl"],
        {"lr": 0.5},
    )
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: boom (trainer.py)")


def test_without_a_key_the_launch_fails_before_anything_starts(tmp_path, auth_server):
    url, _ = auth_server
    marker = tmp_path / "started"
    for command in ("run", "launch"):
        if command == "run":
            args = ["run", "--mode", "online", "--", "touch", str(marker)]
        else:
            job = tmp_path / "job.toml"
            job.write_text(
                f'[run]\nmode = "online"\n[[component]]\nname = "t"\n'
                f'command = ["touch", "{marker}"]\n'
            )
            args = ["launch", str(job)]
        proc = openruns_cli(
            *args, cwd=tmp_path, env={"OPENRUNS_BASE_URL": url, "OPENRUNS_DIR": str(tmp_path)}
        )
        assert proc.returncode == 2, proc.stderr
        assert "openruns keys create" in proc.stderr and "OPENRUNS_API_KEY" in proc.stderr
        assert not marker.exists()


def test_online_console_lines_reach_the_server_and_sync_sends_offline_ones(tmp_path, auth_server):
    url, key = auth_server
    child = script(tmp_path, "child.py", CHILD)
    env = {"OPENRUNS_BASE_URL": url, "OPENRUNS_API_KEY": key, "OPENRUNS_DIR": str(tmp_path)}
    proc = openruns_cli(
        "run", "--mode", "online", "--name", "console-job", "--", sys.executable, child,
        cwd=tmp_path, env={**env, "OPENRUNS_CAPTURE_CONSOLE": "1"},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    run_id = json.loads(proc.stdout.strip().splitlines()[-1])["id"]
    with httpx.Client(
        base_url=url + "/api/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=patience.REQUEST,
    ) as api:
        page = api.get(f"/runs/{run_id}/logs").raise_for_status().json()
        lines = [(item["source"], item["stream"], item["line"]) for item in page["items"]]
        assert ("job step", "stdout", proc.stdout.strip().splitlines()[-1]) in lines

        # An offline run's console lines go up with `openruns sync`.
        offline = script(
            tmp_path,
            "offline.py",
            OFFLINE_PRINTER,
        )
        done = subprocess.run(
            [sys.executable, offline], cwd=tmp_path, capture_output=True, text=True,
            env=cli_env({"OPENRUNS_CAPTURE_CONSOLE": "1"}), timeout=patience.EXIT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        synced = openruns_cli("sync", "off", cwd=tmp_path, env=env)
        assert synced.returncode == 0, synced.stderr
        offline_id = next(p.name for p in (tmp_path / "off").iterdir() if p.is_dir())
        items = api.get(f"/runs/{offline_id}/logs").raise_for_status().json()["items"]
        assert [(i["source"], i["line"]) for i in items] == [("main", "offline line")]
