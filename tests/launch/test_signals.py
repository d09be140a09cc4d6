"""
SIGTERM in attached processes (issue 20): a child of `openruns run`, a component of `openruns
launch`, and a process attached through `RUN_ID` alone each flush before the signal's default
ends them; what they could not deliver is spooled and counted; only the owner sets a status.
Real processes, a real server on loopback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from openruns.server import serve_in_thread

from .. import patience
from ..online.conftest import synced
from ..online.faultproxy import FaultProxy, busy_after_one
from ..procs import default_signals, track
from .helpers import cli_env, script, spawn_cli, wait_for

# Logs episodes as fast as it can, writing each step down once its log_episodes returned, until
# a signal ends it. A signal between the call and the note leaves one step logged but unnoted.
LOGGER = """
import os, sys, time, openruns
if os.environ.get("ATTACH_BY_RUN_ID"):
    run = openruns.init(kind="train", id=os.environ["RUN_ID"])  # prime-rl's form
else:
    run = openruns.init()
assert run.attached, "only the owner sets a status"
notes = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
step = 0
while True:
    run.log_episodes([{"id": f"ep-{step}", "traces": [{"text": "x" * 20000}]}], step=step)
    os.write(notes, b"%d\\n" % step)
    step += 1
    if step == 1000:  # a few batches (one a second, pipeline.MAX_BATCH_AGE) have gone
        open(sys.argv[2], "w").close()
    time.sleep(0.002)
"""


@pytest.fixture
def server(tmp_path):
    handle = serve_in_thread(data_dir=tmp_path / "server-data")
    yield handle
    handle.stop()


def _episode_ids(url: str, run_id: str) -> set[str]:
    with httpx.Client(base_url=url + "/api/v1", timeout=30) as api:
        ids, cursor = set(), None
        while True:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = api.get(f"/runs/{run_id}/episodes", params=params).raise_for_status().json()
            ids |= {item["id"] for item in page["items"]}
            if not (cursor := page["next_cursor"]):
                return ids


def _run_doc(url: str, run_id: str) -> dict:
    return httpx.get(f"{url}/api/v1/runs/{run_id}", timeout=30).raise_for_status().json()


def _run_ids(url: str) -> list[str]:
    page = httpx.get(f"{url}/api/v1/runs", timeout=30).raise_for_status().json()
    return [run["id"] for run in page["items"]]


def _logged(notes) -> int:
    return len(notes.read_text().splitlines())


def _job(tmp_path, name: str, command: list[str], grace: float | None = None):
    """A job file: one component, an online run whose directory is tmp_path/local."""
    launch = "" if grace is None else f"[launch]\ngrace = {grace}\n"
    job = tmp_path / "job.toml"
    job.write_text(
        f'[run]\nmode = "online"\ndir = "{tmp_path / "local"}"\n{launch}\n'
        f"[[component]]\nname = {name!r}\ncommand = {json.dumps(command)}\n"
    )
    return job


def _every_step(ids: set[str], noted: int, stderr: str = "") -> None:
    """Exactly the steps logged: those noted, and at most the one a signal cut before its note."""
    expected = ({f"ep-{i}" for i in range(n)} for n in (noted, noted + 1))
    assert ids in expected, (len(ids), noted, stderr)


def test_a_child_of_openruns_run_sigtermed_mid_logging_has_every_record_counted(server, tmp_path):
    # The server takes the first episode upload and then is too busy for the rest: at the
    # signal the child has records delivered, and records it can only spool.
    taken = {"episodes": 0}
    proxy = FaultProxy(server.url, rate=0.0, rule=busy_after_one(taken)).start()
    try:
        child = script(tmp_path, "child.py", LOGGER)
        notes, ready = tmp_path / "notes", tmp_path / "ready"
        env = {
            "OPENRUNS_BASE_URL": proxy.url,
            "OPENRUNS_DIR": str(tmp_path / "local"),
            "OPENRUNS_FINISH_TIMEOUT": "4",  # the child's drain on SIGTERM: 4 s, then spool
            "OPENRUNS_CAPTURE_CONSOLE": "0",
            "OPENRUNS_SYSTEM_METRICS_INTERVAL": "0",
        }
        owner = spawn_cli(
            "run", "--mode", "online", "--", sys.executable, child, str(notes), str(ready),
            cwd=tmp_path, env=env,
        )  # fmt: skip
        wait_for(ready, timeout=patience.START)
        owner.send_signal(signal.SIGTERM)  # scancel, a time limit: forwarded to the child
        _, stderr = owner.communicate(timeout=patience.EXIT)
    finally:
        proxy.stop()
    assert owner.returncode == 143, stderr
    run_dir = next(p for p in (tmp_path / "local").iterdir() if p.is_dir())
    doc = _run_doc(server.url, run_dir.name)
    assert (doc["status"], doc["error"]) == ("failed", "terminated by SIGTERM")
    delivered = _episode_ids(server.url, run_dir.name)
    spooled = doc["losses"].get("spooled_records", 0)  # the child's, counted by the owner
    assert delivered and spooled, (len(delivered), spooled, taken, proxy.faults)
    assert doc["losses"]["dropped_records"] == 0 and doc["losses"]["failed_records"] == {}
    noted = _logged(notes)
    assert len(delivered) + spooled in (noted, noted + 1)
    synced(server.url, run_dir)  # the spool holds exactly what the server lacks
    _every_step(_episode_ids(server.url, run_dir.name), noted)


def test_a_component_of_openruns_launch_sigtermed_mid_logging_flushes_first(server, tmp_path):
    child = script(tmp_path, "component.py", LOGGER)
    notes, ready = tmp_path / "notes", tmp_path / "ready"
    job = _job(tmp_path, "orchestrator", [sys.executable, child, str(notes), str(ready)])
    env = {
        "OPENRUNS_BASE_URL": server.url,
        "OPENRUNS_CAPTURE_CONSOLE": "0",
        "OPENRUNS_SYSTEM_METRICS_INTERVAL": "0",
    }
    owner = spawn_cli("launch", str(job), cwd=tmp_path, env=env)
    wait_for(ready, timeout=patience.START)
    owner.send_signal(signal.SIGTERM)
    _, stderr = owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 143, stderr
    # Everything was delivered, so the run left no local directory: the server's only run.
    assert not any(p.is_dir() for p in (tmp_path / "local").glob("*"))
    (run_id,) = _run_ids(server.url)
    doc = _run_doc(server.url, run_id)
    assert (doc["status"], doc["error"]) == ("failed", "terminated by SIGTERM")
    assert doc["losses"]["dropped_records"] == 0 and not doc["losses"].get("spooled_records")
    _every_step(_episode_ids(server.url, run_id), _logged(notes), stderr)


def test_a_process_attached_through_run_id_alone_flushes_on_sigterm_and_sets_no_status(
    server, tmp_path
):
    with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as api:
        run_id = api.post("/runs", json={"kind": "train", "heartbeat": False}).json()["id"]
    child = script(tmp_path, "pod.py", LOGGER)
    notes, ready = tmp_path / "notes", tmp_path / "ready"
    env = cli_env(
        {
            "RUN_ID": run_id,  # all a hosted platform passes to the pod (seed 000)
            "ATTACH_BY_RUN_ID": "1",
            "OPENRUNS_BASE_URL": server.url,
            "OPENRUNS_DIR": str(tmp_path / "local"),
            "OPENRUNS_CAPTURE_CONSOLE": "0",
            "OPENRUNS_SYSTEM_METRICS_INTERVAL": "0",
        }
    )
    for name in ("OPENRUNS_RUN_ID", "OPENRUNS_RUN_PID", "OPENRUNS_RUN_DIR"):
        env.pop(name, None)
    pod = track(
        subprocess.Popen(
            [sys.executable, child, str(notes), str(ready)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_signals,
        )
    )
    wait_for(ready, timeout=patience.START)
    pod.send_signal(signal.SIGTERM)  # a hosted pause, a preemption
    _, stderr = pod.communicate(timeout=patience.EXIT)
    assert pod.returncode == -signal.SIGTERM, stderr  # the default disposition still applies
    _every_step(_episode_ids(server.url, run_id), _logged(notes))
    assert _run_doc(server.url, run_id)["status"] == "running"  # its creator closes it


def test_a_component_killed_before_it_could_count_is_counted_by_the_owner(server, tmp_path):
    # A component whose own SIGTERM handler never returns (a checkpoint that hangs) outlives
    # the launcher's grace and is SIGKILLed: whatever it had not delivered, it could not say.
    child = script(
        tmp_path,
        "stuck.py",
        """
        import signal, sys, time, openruns
        run = openruns.init()
        run.log_episodes([{"id": "ep-0", "traces": []}], step=0)
        run.flush()
        signal.signal(signal.SIGTERM, lambda *_: time.sleep(3600))  # replaces openruns' own
        open(sys.argv[1], "w").close()
        time.sleep(3600)
        """,
    )
    ready = tmp_path / "ready"
    job = _job(tmp_path, "trainer", [sys.executable, child, str(ready)], grace=1)
    env = {"OPENRUNS_BASE_URL": server.url, "OPENRUNS_CAPTURE_CONSOLE": "0"}
    owner = spawn_cli("launch", str(job), cwd=tmp_path, env=env)
    wait_for(ready, timeout=patience.START)
    owner.send_signal(signal.SIGTERM)
    _, stderr = owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 143, stderr
    assert "trainer still running 1 s after the stop signal: SIGKILL" in stderr
    assert "1 of the processes that wrote to it ended without closing it" in stderr
    (run_id,) = _run_ids(server.url)
    doc = _run_doc(server.url, run_id)
    assert doc["status"] == "failed" and doc["losses"]["unclosed_writers"] == 1, doc
    assert _episode_ids(server.url, run_id) == {"ep-0"}  # what it delivered stays
