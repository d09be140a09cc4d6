"""
What a new user meets first (issue 24): init() against nothing, the wrong scheme or the wrong
path, and what an online run leaves on disk.

The waits that must not happen are held by the settings, not by clocks: these tests give the
SDK an hour to connect and to retry, so an init() or finish() that waited for a refused
connection or retried a TLS failure would run into the test's timeout instead of passing.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

import pytest

import openruns
from openruns.errors import ConfigurationError
from openruns.rundir import iter_stream

from .conftest import SRC, free_port, get, metric_points

AN_HOUR = "3600"


@pytest.fixture
def patient(monkeypatch):
    """Settings under which any wait for the server would outlast the test's timeout."""
    for name in ("CONNECT_TIMEOUT", "RETRY_TIMEOUT", "REQUEST_TIMEOUT"):
        monkeypatch.setenv(f"OPENRUNS_{name}", AN_HOUR)


def test_nothing_listening_spools_at_once_and_finish_does_not_wait(patient, tmp_path, caplog):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connections are refused
    with caplog.at_level(logging.WARNING, logger="openruns"):
        run = openruns.init(kind="eval", base_url=url, dir=tmp_path / "local")
        run.log_metrics({"loss": 0.5}, step=0)
        run.finish()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "refused the connection" in said and f"openruns sync {run.dir}" in said
    assert (run.dropped_records, run.spooled_records) == (0, 1)
    rows = list(iter_stream(run.dir, "metrics"))
    assert [(r["step"], r["values"]) for r in rows] == [(0, {"loss": 0.5})]  # for sync


def test_https_against_a_plain_http_server_fails_init_naming_the_fix(patient, server, tmp_path):
    wrong = server.url.replace("http://", "https://")
    with pytest.raises(ConfigurationError) as raised:
        openruns.init(base_url=wrong, dir=tmp_path / "local")
    message = str(raised.value)
    assert "TLS handshake failed" in message and "the base_url= argument" in message
    assert f"use {server.url}" in message
    assert not (tmp_path / "local").exists()  # nothing was opened


def test_a_wrong_base_path_names_the_url_tried_and_the_setting(
    patient, server, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENRUNS_BASE_URL", server.url + "/tracker")
    with pytest.raises(ConfigurationError) as raised:
        openruns.init(dir=tmp_path / "local")
    message = str(raised.value)
    assert f"GET {server.url}/tracker/api/v1/health: HTTP 404" in message
    assert "set by OPENRUNS_BASE_URL" in message


def test_an_online_run_that_delivered_everything_leaves_no_directory(server, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the default dir, ./openruns-runs, is made here
    run = openruns.init(kind="train", base_url=server.url)
    assert run.dir is not None and run.dir.parent == work / "openruns-runs"
    for step in range(5):
        run.log_metrics({"loss": 1 / (step + 1)}, step=step)
    run.log_episodes([{"id": f"ep-{i}", "traces": [{"reward": 1.0}]} for i in range(3)], step=0)
    run.finish()
    assert get(server.url, f"/runs/{run.id}")["status"] == "completed"
    assert len(metric_points(server.url, run.id, "loss")) == 5
    assert list(work.iterdir()) == []  # neither the run's directory nor ./openruns-runs


def test_a_run_directory_with_undelivered_batches_stays(server, tmp_path):
    other = tmp_path / "runs" / "kept-by-another-writer"
    (other / "metrics").mkdir(parents=True)
    (other / "metrics" / "w-0.ndjson.zst").write_bytes(b"")  # a segment: never removed
    run = openruns.init(kind="eval", base_url=server.url, dir=tmp_path / "runs")
    (run.dir / "episodes").mkdir(parents=True, exist_ok=True)
    (run.dir / "episodes" / "w-1.ndjson.zst.open").write_bytes(b"")  # another writer's
    run.finish()
    assert (run.dir / "episodes" / "w-1.ndjson.zst.open").exists()
    assert (run.dir / "run.json").exists()  # sync still knows the run
    assert (other / "metrics" / "w-0.ndjson.zst").exists()


def test_an_offline_run_says_once_where_it_went_and_how_to_upload_it(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="openruns"):
        run = openruns.init(kind="eval", mode="offline", dir=tmp_path / "runs")
        run.log_metrics({"acc": 1.0}, step=0)
        run.finish()
    said = [r.getMessage() for r in caplog.records if "offline" in r.getMessage()]
    assert said == [
        f"openruns: run {run.id} is offline, written to {run.dir}; upload it to a server with: "
        f"openruns sync {run.dir}"
    ]


def test_sync_counts_in_words_and_draws_no_empty_progress_bar(server, tmp_path):
    run = openruns.init(kind="eval", mode="offline", dir=tmp_path / "runs")
    run.log_metrics({"acc": 1.0}, step=0)
    run.finish()  # one batch of one row

    def sync() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "openruns.cli", "sync", str(run.dir), "--base-url", server.url],
            env={**os.environ, "PYTHONPATH": SRC},
            capture_output=True,
            text=True,
            timeout=120,
        )

    first, second = sync(), sync()
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert f"{run.id}: 1 batch (1 record) uploaded, 0 already there" in first.stdout
    assert f"{run.id}: 0 batches (0 records) uploaded, 1 already there" in second.stdout
    assert "1/1" in first.stderr and "0/0" not in second.stderr


def test_the_waits_split_from_connect_timeout_hold_on_their_own(tmp_path, monkeypatch, caplog):
    """
    A server that takes connections and never answers, `connect_timeout` an hour and the waits
    split from it (issue 23) short: init() opens the run without the server after
    `init_timeout`, finish() leaves the record in the spool after `silent_server_timeout`, the
    small calls end after `metadata_timeout`. Were any still held by connect_timeout, the test
    would run into its own timeout instead of passing.
    """
    monkeypatch.setenv("OPENRUNS_CONNECT_TIMEOUT", AN_HOUR)
    for name in ("INIT", "SILENT_SERVER", "METADATA", "REQUEST", "RETRY"):
        monkeypatch.setenv(f"OPENRUNS_{name}_TIMEOUT", "1")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens; never accepts, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with caplog.at_level(logging.WARNING, logger="openruns"):
            run = openruns.init(kind="eval", base_url=url, dir=tmp_path / "local")
            run.log_metrics({"loss": 0.5}, step=0)
            run.finish()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "did not answer" in said and f"openruns sync {run.dir}" in said
    assert (run.dropped_records, run.spooled_records) == (0, 1)
    rows = list(iter_stream(run.dir, "metrics"))
    assert [(r["step"], r["values"]) for r in rows] == [(0, {"loss": 0.5})]
