"""
Each RL framework's W&B logging, as that framework makes its calls, from the real wandb 0.31.0
SDK in a subprocess whose environment points it at a real `openruns server` (WANDB_BASE_URL,
WANDB_API_KEY; a temporary HOME and WANDB_DIR), read back through the native API: the run, its
metrics at the framework's steps, its tables of rollouts as episodes (each re-logged row
once), images, and the status.

The calls follow the frameworks' source at the commits the search tool's snapshots hold:

- transformers 5.24.0 `integrations/integration_utils.py` WandbCallback, the real class, driven
  through transformers' CallbackHandler with the events and logs Trainer sends (torch does not
  install within the suite's budget: docs/decisions.md), and TRL f2cd577
  `trl/trainer/grpo_trainer.py` `log`: the completions table from a DataFrame, with an image.
- verl b178a3c `verl/utils/tracking.py`: Tracking (init, `log(data=, step=)`, `finish(exit_code=0)`)
  and ValidationGenerationsLogger (the table copied and grown, `val/generations` at the step),
  in the order `verl/trainer/ppo/ray_trainer.py` fit() makes them.
- OpenRLHF 3c3be62 `openrlhf/utils/logging_utils.py` WandbLogger.
- NeMo-RL 00617d3 `nemo_rl/utils/logger.py` WandbLogger with `nemo_rl/experience/rollouts.py`'s
  `{agent}/full_result` table and histograms among the metrics.
- prime-rl: openruns' own W&B monitor (`openruns.monitors`, what prime-rl's monitor does since
  559b447), and prime-rl's samples tables before #3275 removed them (9975d8868^
  `src/prime_rl/utils/monitor/wandb.py`: INCREMENTAL tables logged with `"step"` in the row).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess

from .helpers import run_file

pytestmark = pytest.mark.slow

FRAMEWORKS = Path(__file__).parent / "frameworks"


def run_framework(script: str, tmp_path: Path, server: ServerProcess, **env: str) -> str:
    """Run frameworks/`script` as a user would (helpers.run_file); the run's name."""
    name = f"{Path(script).stem.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    report = run_file(FRAMEWORKS / script, tmp_path, server.url, RUN_NAME=name, **env)
    assert report["name"] == name
    return name


def the_run(client: Client, name: str) -> dict[str, Any]:
    (run,) = [r for r in client.runs(name=name) if r["name"] == name]
    return run


def series(client: Client, run_id: str, key: str) -> list[tuple[int | None, float]]:
    return [(r["step"], r["value"]) for r in client.metrics(run_id, [key])]


def episodes(client: Client, run_id: str, **query: Any) -> list[dict[str, Any]]:
    return [client.episode(run_id, row["id"]) for row in client.episodes(run_id, **query)]


def test_transformers_wandb_callback_and_trl_completions(server, client, tmp_path):
    name = run_framework("trl_transformers.py", tmp_path, server, WANDB_PROJECT="trl-tiny")
    native = the_run(client, name)
    assert native["status"] == "completed"
    assert native.get("project") == "trl-tiny"
    run = client.run(native["id"])
    config_text = json.dumps(run["config"])
    assert "learning_rate" in config_text and "model/num_parameters" in config_text
    assert [v for _, v in series(client, native["id"], "train/loss")] == [1.0, 0.5, 1 / 3]
    assert [v for _, v in series(client, native["id"], "eval/loss")] == [0.25]
    assert run["summary"]["train_runtime"] == 1.5 and run["summary"]["train_loss"] == 0.6
    # The completions tables: four episodes a step, at the trainer's global step, the reward
    # functions' scores summed as TRL's default weights do.
    steps = {row["step"]: row for row in client.steps(native["id"])}
    assert sorted(steps) == [1, 2, 3] and {row["count"] for row in steps.values()} == {4}
    assert steps[2]["avg_reward"] == pytest.approx(1.0)
    logged = episodes(client, native["id"], step=2)
    assert sorted(e["reward"] for e in logged) == [0.5, 0.5, 1.5, 1.5]
    (pictured,) = [e for e in logged if isinstance(e.get("prompt"), list)]
    image, text = pictured["prompt"][0]["content"]
    assert text == {"type": "text", "text": "What is 2+0? (picture 0)"}
    url = f"{server.url}/api/v1/runs/{native['id']}/media/{image['image_url']['url']}"
    media = httpx.get(url, timeout=30)
    assert media.status_code == 200 and media.headers["content-type"] == "image/png"
    assert media.content.startswith(b"\x89PNG")


def test_verl_tracking_and_validation_generations(server, client, tmp_path):
    name = run_framework("verl_tracking.py", tmp_path, server)
    native = the_run(client, name)
    assert native["status"] == "completed"
    pg_loss = series(client, native["id"], "actor/pg_loss")
    assert pg_loss == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25)]
    assert [s for s, _ in series(client, native["id"], "val-core/gsm8k/reward/mean@1")] == [0, 2, 4]
    # Each validation re-logged the whole grown table: its rows are episodes once, two a row.
    steps = {row["step"]: row["count"] for row in client.steps(native["id"], kind="eval")}
    assert steps == {0: 2, 2: 2, 4: 2}
    at_2 = episodes(client, native["id"], step=2)
    assert sorted((e["prompt"], e["completion"], e["reward"]) for e in at_2) == [
        ("user: 3*3?", "11", 0.0),
        ("user: 4*4?", "18", 0.0),
    ]


def test_openrlhf_wandb_logger(server, client, tmp_path):
    name = run_framework("openrlhf_logger.py", tmp_path, server)
    native = the_run(client, name)
    assert native["status"] == "completed"
    assert native.get("group") == "ppo-sweep"
    policy_loss = [v for _, v in series(client, native["id"], "train/policy_loss")]
    assert policy_loss == pytest.approx([0.1, 0.2, 0.3])
    assert [v for _, v in series(client, native["id"], "eval/eval_reward")] == [0.9]
    rows = sorted((r["step"], r["reward"]) for r in client.episodes(native["id"]))
    assert [step for step, _ in rows] == [1, 2, 3]
    assert [reward for _, reward in rows] == pytest.approx([1 / 3, 2 / 3, 1.0])
    (last,) = episodes(client, native["id"], step=3)
    assert last["completion"] == "Question: 3+1? Answer: 4"
    # The three tables held 1 + 2 + 3 rows; only the 3 rollouts were stored, once each.
    assert stored_records(server, native["id"]) == 3


def stored_records(server: ServerProcess, run_id: str) -> int:
    """Records in the run's episode segments, read from the server's own database."""
    db = sqlite3.connect(f"file:{server.data_dir / 'openruns.db'}?mode=ro", uri=True)
    try:
        (total,) = db.execute(
            "SELECT COALESCE(SUM(s.records), 0) FROM segments s JOIN runs r ON r.seq = s.run_seq"
            " WHERE r.id = ? AND s.stream = 'episodes'",
            (run_id,),
        ).fetchone()
    finally:
        db.close()
    return int(total)


def test_nemo_rl_wandb_logger_with_full_result_tables(server, client, tmp_path):
    name = run_framework("nemo_rl_logger.py", tmp_path, server)
    native = the_run(client, name)
    assert native["status"] == "completed"
    assert [s for s, _ in series(client, native["id"], "train/total_reward/mean")] == [1, 2]
    logged = episodes(client, native["id"], step=2)
    assert sorted(e["reward"] for e in logged) == [0.0, 1.0]
    (right,) = [e for e in logged if e["reward"] == 1.0]
    chat = [(m["role"], m["content"]) for m in right["messages"]]
    assert chat == [("user", "What is 2*1?"), ("assistant", "2")]
    assert right["env"] == "calculator_agent"


def test_prime_rl_wandb_monitor_through_openruns_monitors(server, client, tmp_path):
    name = run_framework("prime_rl_monitor.py", tmp_path, server)
    native = the_run(client, name)
    assert native["status"] == "completed"
    assert native.get("project") == "prime-rl-tiny"
    assert [v for _, v in series(client, native["id"], "reward/mean")] == [0.0, 0.5, 1.0]
    assert len(series(client, native["id"], "inference/queue")) == 3


def test_prime_rl_samples_tables_before_3275(server, client, tmp_path):
    name = run_framework("prime_rl_samples.py", tmp_path, server)
    native = the_run(client, name)
    assert native["status"] == "completed"
    train = {row["step"]: row["count"] for row in client.steps(native["id"], kind="train")}
    assert train == {0: 2, 1: 2}  # each increment's rows, once
    logged = episodes(client, native["id"], step=1, kind="train")
    best = max(logged, key=lambda e: e["reward"])
    assert best["messages"] == [
        {"role": "user", "content": "Reverse: abc0"},
        {"role": "assistant", "content": "0cba"},
    ]
    assert (best["env"], best["reward"], best["task"]["data"]["answer"]) == (
        "reverse-text",
        1.0,
        "0cba",
    )
    (evaluated,) = episodes(client, native["id"], kind="eval")
    assert (evaluated["step"], evaluated["completion"]) == (1, "0cba")
