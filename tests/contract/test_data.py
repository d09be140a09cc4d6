"""
What an RL orchestrator's run holds, against a real server: train and eval episodes and metrics
in one run, read and exported apart; annotations from another process folded into episodes and
the two meanings of a step; metric rows without a step kept with their times.
"""

from __future__ import annotations

import io
import time

import orjson
import pyarrow.parquet as pq

import openruns
from openruns.api import Client

from .conftest import env_for, python


def _episode(eid: str, step: int, work: str, env: str, reward: float) -> dict:
    # As verifiers stamps an in-training episode: run.type train, run.work.type train | eval.
    return {
        "id": eid,
        "env": {"id": env, "name": env},
        "run": {"type": "train", "work": {"type": work, "step": step}},
        "traces": [{"id": f"{eid}-t0", "reward": reward, "info": {"kind": work}}],
    }


def test_train_and_eval_of_one_run_are_read_and_exported_apart(server, api, tmp_path):
    run = openruns.init(kind="train", base_url=server.url, dir=tmp_path / "local")
    for step in (0, 1):
        train = [_episode(f"tr-{step}-{i}", step, "train", "reverse", 0.1 * i) for i in range(3)]
        run.log_episodes(train, subset="all")
        run.log_metrics({"reward/mean": 0.1 * step, "loss": 1.0 - step}, step=step)
    evals = [_episode(f"ev-{i}", 1, "eval", "gsm8k", 0.9) for i in range(2)]
    run.log_episodes(evals)
    run.log_metrics({"eval/gsm8k/reward/mean": 0.9, "eval/gsm8k/count": 2}, step=1)
    run.finish()

    def ids(**params):
        items = api.get(f"/runs/{run.id}/episodes", params=params).json()["items"]
        return sorted(e["id"] for e in items)

    assert ids(kind="eval") == ["ev-0", "ev-1"]
    assert ids(kind="train", step=1) == ["tr-1-0", "tr-1-1", "tr-1-2"]
    assert ids(kind="eval", env="gsm8k", step=1) == ["ev-0", "ev-1"]
    assert ids(subset="all") == sorted(f"tr-{s}-{i}" for s in (0, 1) for i in range(3))
    row = api.get(f"/runs/{run.id}/episodes", params={"kind": "train"}).json()["items"][0]
    assert (row["kind"], row["subset"], row["env"]) == ("train", "all", "reverse")
    steps = api.get(f"/runs/{run.id}/steps", params={"kind": "eval"}).json()
    assert [(s["step"], s["count"]) for s in steps] == [(1, 2)]
    with Client(server.url) as client:
        assert len(list(client.episodes(run.id, kind="train"))) == 6
        eval_keys = {r["key"] for r in client.metrics(run.id, kind="eval")}
        train_keys = {r["key"] for r in client.metrics(run.id, kind="train")}
    assert eval_keys == {"eval/gsm8k/reward/mean", "eval/gsm8k/count"}
    assert train_keys == {"reward/mean", "loss"}

    nd = api.get(f"/runs/{run.id}/export/episodes.ndjson", params={"kind": "eval"})
    exported = [orjson.loads(line) for line in nd.content.splitlines()]
    assert sorted(e["id"] for e in exported) == ["ev-0", "ev-1"]
    table = pq.read_table(
        io.BytesIO(
            api.get(f"/runs/{run.id}/export/episodes.parquet", params={"kind": "train"}).content
        )
    )
    assert set(table.column("kind").to_pylist()) == {"train"} and table.num_rows == 6
    metrics = api.get(f"/runs/{run.id}/export/metrics.ndjson", params={"kind": "eval"})
    assert {orjson.loads(line)["key"] for line in metrics.content.splitlines()} == eval_keys


TRAINER = """
import openruns
from openruns.api import Client
run = openruns.init(kind="train")      # attached through OPENRUNS_RUN_ID: only flushes
assert run.attached
run.log_annotations([
    # dispatched at 0, trained at 1: off-policy by one step
    {"episode_id": "e0", "step": 1, "info": {"advantage": 0.5, "ship": {"step": 1}}},
    {"episode_id": "e0", "trace_id": "e0-t0",
     "branches": [{"index": 0, "trainer_logprobs": [-0.1, -0.2]}]},
    {"episode_id": "e1", "step": 1, "info": {"advantage": -0.5}},
    {"episode_id": "e2", "step": 2, "info": {"advantage": 0.0}},
])
run.finish()
"""


def test_annotations_from_another_process_fold_in_and_give_a_step_two_meanings(
    server, api, tmp_path
):
    run = openruns.init(kind="train", base_url=server.url, dir=tmp_path / "local")
    run.log_episodes([_episode("e0", 0, "train", "math", 0.0)])
    run.log_episodes([_episode(f"e{i}", 1, "train", "math", 1.0) for i in (1, 2)])
    assert run.flush(30)
    env = env_for(server, tmp_path, OPENRUNS_COMPONENT="trainer")
    trainer = python(TRAINER, env, cwd=tmp_path)
    assert trainer.returncode == 0, trainer.stderr
    # A late fact: the orchestrator marks e0 effective after the trainer's annotation.
    run.log_annotations([{"episode_id": "e0", "info": {"effective": True, "advantage": 0.6}}])
    run.finish()

    e0 = api.get(f"/runs/{run.id}/episodes/e0").json()
    assert e0["info"] == {"advantage": 0.6, "ship": {"step": 1}, "effective": True}
    assert e0["traces"][0]["annotated_branches"] == [{"index": 0, "trainer_logprobs": [-0.1, -0.2]}]
    assert e0["annotations"] == {"count": 3, "producers": ["main", "trainer"], "trained_step": 1}
    raw = api.get(f"/runs/{run.id}/episodes/e0", params={"annotations": "false"}).json()
    assert "annotations" not in raw and "info" not in raw

    dispatched = api.get(f"/runs/{run.id}/steps").json()
    assert [(s["step"], s["count"], s["off_policy"]) for s in dispatched] == [(0, 1, 1), (1, 2, 1)]
    trained = api.get(f"/runs/{run.id}/steps", params={"by": "trained"}).json()
    assert [(s["step"], s["count"], s["off_policy"]) for s in trained] == [(1, 2, 1), (2, 1, 1)]
    at_1 = api.get(f"/runs/{run.id}/episodes", params={"step": 1, "by": "trained"}).json()
    rows = {e["id"]: (e["step"], e["trained_step"]) for e in at_1["items"]}
    assert rows == {"e0": (0, 1), "e1": (1, 1)}
    with Client(server.url) as client:
        producers = [a["producer"] for a in client.annotations(run.id, episode_id="e0")]
        assert producers == ["trainer", "trainer", "main"]
        assert client.episode(run.id, "e2")["annotations"]["trained_step"] == 2


def test_metric_rows_without_a_step_are_kept_with_their_times(server, api, tmp_path):
    run = openruns.init(kind="train", base_url=server.url, dir=tmp_path / "local")
    run.log_metrics({"loss": 1.0}, step=7)
    before = time.time()
    for lag in (0.01, 0.02, 0.03):
        run.log_metrics({"event_loop_lag/p99": lag})  # prime-runs: a row keyed by its time
    run.finish()
    body = api.get(f"/runs/{run.id}/metrics", params={"max_points": 0}).json()
    assert body["series"] == {"loss": {"step": [7], "value": [1.0], "min": [1.0], "max": [1.0]}}
    timed = body["time"]["event_loop_lag/p99"]
    assert timed["value"] == [0.01, 0.02, 0.03]
    assert timed["ts"] == sorted(timed["ts"]) and timed["ts"][0] >= before


def test_an_offline_run_syncs_its_annotations_and_time_keyed_rows(server, api, tmp_path):
    run = openruns.init(kind="train", mode="offline", dir=tmp_path / "offline")
    run.log_episodes([_episode("e0", 0, "train", "math", 1.0)])
    run.log_annotations([{"episode_id": "e0", "step": 3, "info": {"advantage": 1.0}}])
    run.log_metrics({"inference/queue": 4.0})
    run.finish()
    from openruns.sync import sync_run
    from openruns.wire import WireClient

    client = WireClient(server.url, None)
    try:
        result = sync_run(client, run.dir)
    finally:
        client.close()
    assert not result.errors and result.status == "completed", result.errors
    e0 = api.get(f"/runs/{run.id}/episodes/e0").json()
    assert e0["info"] == {"advantage": 1.0} and e0["annotations"]["trained_step"] == 3
    timed = api.get(f"/runs/{run.id}/metrics").json()["time"]
    assert timed["inference/queue"]["value"] == [4.0]
