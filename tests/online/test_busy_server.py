"""A real server that answers 429s: the SDK paces its uploads, merges what waits, and the run
ends with every record on the server exactly once (issue 21)."""

from __future__ import annotations

import logging
import time

import pytest

import openruns
from openruns.server import serve_in_thread

from .conftest import all_episodes, episode, metric_points


@pytest.fixture
def busy_server(tmp_path):
    # One upload per run at a time (caller + run): the run's other senders get 429 at once.
    handle = serve_in_thread(
        data_dir=tmp_path / "server-data", host="127.0.0.1", port=0, max_ingest_per_caller=1
    )
    yield handle
    handle.stop()


def test_a_run_refused_with_429s_delivers_every_record_once(busy_server, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="openruns.server.access"):
        run = openruns.init(kind="train", base_url=busy_server.url, dir=tmp_path / "local")
        for step in range(300):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
            if step % 5 == 0:
                run.log_episodes([episode(step // 5)])
            time.sleep(0.02)  # 6 s: several batches a lane, each cut after 1 s
        run.finish(timeout=120)
    answers = [r.access for r in caplog.records if hasattr(r, "access")]
    uploads = [a for a in answers if a["path"].endswith(("/metrics", "/episodes"))]
    assert any(a["status"] == 429 for a in uploads), "the server never refused: nothing tested"
    assert all(a["status"] in (200, 429) for a in uploads), uploads
    assert (run.spooled_records, run.dropped_records, run.failed_records) == (0, 0, {})
    points = metric_points(busy_server.url, run.id, "loss")
    assert points == [(step, 1.0 / (step + 1)) for step in range(300)]
    ids = [item["id"] for item in all_episodes(busy_server.url, run.id)]
    assert sorted(ids) == sorted(f"ep-{i}" for i in range(60))  # each once
