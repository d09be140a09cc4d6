"""Every CLI read with --json, in a subprocess against the seeded server: one JSON document on
stdout with the documented fields (docs/agents.md); an error, one line on stderr and non-zero."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import orjson

from .. import patience
from ..services import free_port


def openruns(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openruns", *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )


def document(*argv: str) -> Any:
    done = openruns(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1  # one document, on one line
    return orjson.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_runs_ls_and_show(seeded):
    url = ["--base-url", seeded.server.url]
    listed = document("runs", "ls", "--json", "--tag", "agents", *url)
    assert [r["id"] for r in listed["runs"]] == [seeded.run_id, seeded.other_id]  # newest first
    run, other = listed["runs"]
    assert (run["name"], run["kind"], run["status"], run["model"]) == (
        "rl-agents",
        "train",
        "running",
        "Qwen/Qwen3-8B",
    )
    assert run["tags"] == ["agents"] and run["summary"] == {"reward": 0.9, "loss": 0.01}
    assert isinstance(run["created_at"], float) and run["finished_at"] is None
    assert run["url"].endswith(seeded.run_id) and other["kind"] == "eval"
    only = document("runs", "ls", "--json", "--kind", "eval", "--limit", "1", *url)
    assert [r["id"] for r in only["runs"]] == [seeded.other_id]

    shown = document("runs", "show", seeded.run_id, "--json", *url)
    assert shown["id"] == seeded.run_id and shown["config"]["filename"] == "rl.toml"
    assert shown["config"]["text"] == "lr = 1e-5\nbatch = 8\n"
    assert shown["status_history"] == [] and shown["project"]


def test_runs_errors_are_one_line_on_stderr(seeded):
    missing = openruns("runs", "show", "no-such-run", "--json", "--base-url", seeded.server.url)
    assert "no run 'no-such-run'" in one_line_error(missing)
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    refused = openruns("runs", "ls", "--json", "--base-url", away, OPENRUNS_RETRY_TIMEOUT="0")
    assert "refused" in one_line_error(refused)


def test_keys_ls(seeded):
    db = seeded.stores.db_args()
    created = openruns("keys", "create", "--team", "red", *db)
    assert created.returncode == 0, created.stderr
    keys = document("keys", "ls", "--json", *db)["keys"]
    assert len(keys) == 1
    key = keys[0]
    assert set(key) == {"id", "team_id", "prefix", "created_at", "revoked_at", "active"}
    assert (key["team_id"], key["revoked_at"], key["active"]) == ("red", None, True)
    assert created.stdout.strip().startswith(key["prefix"])
    assert openruns("keys", "revoke", str(key["id"]), *db).returncode == 0
    [revoked] = document("keys", "list", "--json", "--team", "red", *db)["keys"]
    assert revoked["active"] is False and revoked["revoked_at"] >= key["created_at"]
    assert document("keys", "ls", "--json", "--team", "blue", *db) == {"keys": []}
    broken = openruns("keys", "ls", "--json", "--db", "postgresql://127.0.0.1:1/none")
    assert "cannot open" in one_line_error(broken)


def test_server_check(seeded):
    stores = seeded.stores
    found = document("server", "check", "--json", *stores.cli_args())
    assert found["clean"] is True and found["blobs"] >= 1
    assert found["referenced"] == found["blobs"]
    assert (found["damaged"], found["unreferenced"], found["removed"]) == ([], [], [])
    assert (found["verified"], found["min_age_hours"], found["young"]) == (False, 24.0, 0)

    blobs = stores.open_blobs()
    orphan = "runs/999/episodes/orphan.ndjson.zst"  # unreferenced, and young
    blobs.put_atomic(orphan, b"orphan")
    try:
        done = openruns("server", "check", "--json", "--min-age-hours", "0", *stores.cli_args())
        assert done.returncode == 1 and done.stderr == ""  # a finding, not an error
        found = orjson.loads(done.stdout)
        assert found["clean"] is False
        assert found["unreferenced"] == [{"key": orphan, "bytes": 6}]
    finally:
        blobs.delete(orphan)
