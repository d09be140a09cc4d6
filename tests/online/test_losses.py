"""Loss is always counted and the final status always arrives: spools, outages, sync, times."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time

import httpx
import pytest

import openruns
from openruns.rundir import read_json, segment_paths, write_json_atomic
from openruns.server.config import ServerSettings

from .. import patience
from ..sdk.helpers import spawn
from .conftest import all_episodes, episode, get, synced
from .faultproxy import FaultProxy, busy_after_one


class HangUp:
    """A listener that accepts every connection and closes it unanswered: a server that is not
    there, whose connection attempts can be counted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


def test_a_synced_offline_run_keeps_its_own_times(server, tmp_path):
    run = openruns.init(kind="eval", mode="offline", dir=tmp_path / "runs")
    run.log_episodes([episode(i) for i in range(3)])
    run.finish()
    doc = read_json(run.dir / "run.json")
    hour_ago = time.time() - 3600
    doc.update(created_at=hour_ago, finished_at=hour_ago + 5)  # a run from an hour ago
    write_json_atomic(run.dir / "run.json", doc)
    synced(server.url, run.dir)
    doc_after = get(server.url, f"/runs/{run.id}")
    assert doc_after["status"] == "completed"
    assert doc_after["created_at"] == hour_ago
    assert doc_after["finished_at"] == doc_after["last_heartbeat_at"] == hour_ago + 5


def test_finish_with_the_server_down_from_the_start_tries_once_and_namessynced(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("OPENRUNS_CONNECT_TIMEOUT", "2")  # how long init() looks for it
    nobody = HangUp()
    try:
        run = openruns.init(kind="train", base_url=nobody.url, dir=tmp_path / "local")
        run.log_episodes([episode(i) for i in range(5)])
        run.log_metrics({"loss": 1.0}, step=0)
        run.flush()
        before = nobody.connections
        with caplog.at_level(logging.WARNING, logger="openruns"):
            run.finish()  # finish_timeout is 300 s: none of it is spent on a silent server
        during = nobody.connections - before
    finally:
        nobody.close()
    assert during <= 3, f"finish() tried {during} times to reach a server that never answered"
    assert (run.spooled_records, run.dropped_records) == (6, 0)
    assert any(f"openruns sync {run.dir}" in r.getMessage() for r in caplog.records)
    doc = read_json(run.dir / "run.json")
    assert doc["status"] == "completed" and doc["losses"]["spooled_records"] == 6


def test_records_the_server_could_not_take_are_shown_untilsynced(server, tmp_path):
    def busy_for_episodes(method: str, path: str) -> str | None:
        return "503_before" if path.endswith("/episodes") else None

    proxy = FaultProxy(server.url, rate=0.0, rule=busy_for_episodes).start()
    try:
        run = openruns.init(kind="train", base_url=proxy.url, dir=tmp_path / "local")
        run.log_episodes([episode(i) for i in range(10)])
        run.log_metrics({"loss": 1.0}, step=0)
        run.finish(timeout=6)
    finally:
        proxy.stop()
    assert (run.spooled_records, run.dropped_records, run.failed_records) == (10, 0, {})
    doc = get(server.url, f"/runs/{run.id}")
    assert doc["status"] == "completed" and doc["losses"]["spooled_records"] == 10
    assert all_episodes(server.url, run.id) == []
    synced(server.url, run.dir)
    assert len(all_episodes(server.url, run.id)) == 10
    assert get(server.url, f"/runs/{run.id}")["losses"]["spooled_records"] == 0
    assert segment_paths(run.dir / "episodes") == []  # delivered: the spool is empty


@pytest.mark.slow
def test_finish_is_retried_within_its_budget_and_else_left_tosynced(server, tmp_path):
    refused = {"finish": 0}

    def busy_for_finish(method: str, path: str) -> str | None:
        if path.endswith("/finish") and refused["finish"] < 16:  # 16 s of Retry-After: 1
            refused["finish"] += 1
            return "503_before"
        return None

    proxy = FaultProxy(server.url, rate=0.0, rule=busy_for_finish).start()
    try:
        run = openruns.init(kind="train", base_url=proxy.url, dir=tmp_path / "a")
        run.log_metrics({"loss": 1.0}, step=0)
        run.finish(timeout=60)
        assert get(server.url, f"/runs/{run.id}")["status"] == "completed"

        refused["finish"] = -(10**6)  # from now on the server never takes a finish
        never = openruns.init(kind="train", base_url=proxy.url, dir=tmp_path / "b")
        never.fail("RuntimeError: diverged", timeout=3)
    finally:
        proxy.stop()
    assert get(server.url, f"/runs/{never.id}")["status"] == "running"
    synced(server.url, never.dir)  # the final status waited in the run directory
    doc = get(server.url, f"/runs/{never.id}")
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: diverged")


@pytest.mark.slow  # two server starts: 48 s alone at load 11-15
def test_acknowledged_batches_leave_the_spool(server_process, tmp_path):
    proc = server_process().start()
    run = openruns.init(kind="train", base_url=proc.url, dir=tmp_path / "local")
    proc.kill()
    for i in range(30):  # the server is gone: all of it goes to the spool
        run.log_episodes([episode(i)])
        run.log_metrics({"x": float(i)}, step=i)
    assert run.flush(timeout=30)
    assert segment_paths(run.dir / "episodes")
    proc.start()
    run.finish(timeout=120)
    assert (run.spooled_records, run.dropped_records) == (0, 0)
    assert len(all_episodes(proc.url, run.id)) == 30
    for stream in ("metrics", "episodes"):
        assert segment_paths(run.dir / stream) == []
        assert not (run.dir / stream / "acked.ndjson").exists()


@pytest.mark.slow
def test_a_server_restart_does_not_crash_runs_for_its_own_downtime(server_process):
    # The timeout must outlast the restarted server's own start (its grace counts from when its
    # store opened, and the first read comes after the rest of its start-up): 10 s holds at load
    # 40 on two cores, where 3 s did not.
    proc = server_process("--heartbeat-timeout", "10").start()
    api = httpx.Client(base_url=proc.url + "/api/v1", timeout=30)
    try:
        run_id = api.post("/runs", json={"kind": "train"}).json()["id"]
        api.post(f"/runs/{run_id}/heartbeat").raise_for_status()
        proc.kill()
        time.sleep(11)  # longer than the timeout, while nobody could heartbeat
        proc.start()
        assert api.get(f"/runs/{run_id}").json()["status"] == "running"
        deadline = time.monotonic() + patience.SETTLE
        while api.get(f"/runs/{run_id}").json()["status"] == "running":
            assert time.monotonic() < deadline, "a silent run must still become crashed"
            time.sleep(0.5)
        assert api.get(f"/runs/{run_id}").json()["status"] == "crashed"
    finally:
        api.close()


def test_by_default_a_killed_producer_shows_crashed_within_a_minute():
    from openruns.backends import server as backend
    from openruns.server import app

    timeout = ServerSettings().heartbeat_timeout
    sweep = min(app._MAX_SWEEP_SECONDS, timeout / 4)
    heartbeat_every = min(backend.MAX_HEARTBEAT_INTERVAL, timeout / 3)
    # The last heartbeat comes at most `heartbeat_every` before the kill; a read marks the run
    # crashed `timeout` after it, the sweep at most `sweep` later.
    assert timeout + sweep <= 60 and heartbeat_every * 3 <= timeout


def test_a_sigterm_during_finish_lets_the_drain_end_in_the_spool_then_ends_the_process(
    server, tmp_path
):
    # The server stores the first episodes upload, then is busy for the rest: finish() would
    # wait for it up to its finish_timeout (an hour here). A SIGTERM in that wait (a time
    # limit at the end of a job) must not cut the drain: the close is hurried to the signal's
    # budget, what is not sent is spooled and counted, the status arrives, then the signal
    # ends the process as it would have.
    taken = {"episodes": 0}
    proxy = FaultProxy(server.url, rate=0.0, rule=busy_after_one(taken)).start()
    finishing = tmp_path / "finishing"
    code = f"""
        import openruns, time
        run = openruns.init(kind="eval")
        for i in range(40):
            run.log_episodes([{{"id": f"ep-{{i}}", "traces": [{{"text": "x" * 20000}}]}}])
            time.sleep(0.05)
        open({str(finishing)!r}, "w").close()
        run.finish()
        print("finish returned")
    """
    env = {
        "OPENRUNS_BASE_URL": proxy.url,
        "OPENRUNS_DIR": str(tmp_path / "runs"),
        "OPENRUNS_FINISH_TIMEOUT": "3600",
        "OPENRUNS_CAPTURE_CONSOLE": "0",
        "OPENRUNS_SYSTEM_METRICS_INTERVAL": "0",
    }
    try:
        proc = spawn(code, tmp_path, env)
        deadline = time.monotonic() + patience.START
        while not finishing.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert finishing.exists(), proc.communicate()
        time.sleep(0.5)  # into finish()'s drain
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=patience.EXIT)
    finally:
        proxy.stop()
    assert proc.returncode == -signal.SIGTERM, err  # the signal's own end, after the close
    assert "finish returned" not in out
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    doc = get(server.url, f"/runs/{run_dir.name}")
    assert doc["status"] == "completed", doc  # finish() had said so before the signal
    delivered = {e["id"] for e in all_episodes(server.url, run_dir.name)}
    spooled = doc["losses"].get("spooled_records", 0)
    assert spooled and doc["losses"]["dropped_records"] == 0, (doc["losses"], taken, err)
    assert len(delivered) + spooled >= 40
    synced(server.url, run_dir)
    assert {e["id"] for e in all_episodes(server.url, run_dir.name)} == {
        f"ep-{i}" for i in range(40)
    }
