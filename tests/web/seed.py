"""
Runs the browser tests read, logged through the SDK in online mode against a real server.

Deterministic: fixed random seeds, fixed rewards, so tests can name what they expect.
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

import openruns
from openruns.demo import make_episode

# What init() exports for child processes; popped between runs so each init creates a new run
# instead of attaching to the previous one.
RUN_ENV = ("OPENRUNS_RUN_ID", "OPENRUNS_RUN_PID", "OPENRUNS_RUN_KIND", "OPENRUNS_RUN_DIR")

TRAIN_STEPS = 300  # train/loss points: fewer than a chart is wide, so all are drawn
SPIKY_STEPS = 3000  # train/grad_norm points: more than a chart is wide, so bucketed
SPIKE_STEP, SPIKE = 1234, 100.0
EPISODE_STEPS = 5
EPISODES_PER_STEP = 6
BARE_TRACES = 2  # at step 0 of the train run, in the traces stream
LONG_TEXT = "\n".join(f"line {i}: " + "thinking it through. " * 6 for i in range(120))

CONFIG_TOML = """# RL run of the browser tests
[model]
name = "Qwen/Qwen3-0.6B"

[optimizer]
lr = 1e-6
betas = [0.9, 0.999]
"""


# Records of the other common shapes, logged into the eval run at step 0 (ids fixed).
OPENAI_CHAT = {
    "id": "openai-chat",
    "reward": 0.5,
    "messages": [
        {"role": "system", "content": "You can look up the weather."},
        {"role": "user", "content": "Is it raining in Lyon?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "light rain, 12 C"},
        {"role": "assistant", "content": "Yes: light rain and 12 degrees in Lyon."},
    ],
}
PROMPT_LISTS = {
    "id": "prompt-lists",
    "reward": 1.0,
    "answer": "9",
    "prompt": [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "How many planets orbit the sun, plus one?"},
    ],
    "completion": [{"role": "assistant", "content": "There are 8 planets, so the answer is 9."}],
    "info": {"source": "trl"},
}
PLAIN_STRINGS = {
    "id": "plain-strings",
    "reward": 0.0,
    "prompt": "Translate 'chat' to English.",
    "completion": "cat",
    "answer": "cat (the animal)",
}
UNKNOWN_SHAPE = {
    "id": "unknown-shape",
    "reward": 0.25,
    "observation": {"board": [[0, 1], [1, 0]], "legal_moves": ["a1", "b2"]},
    "action": "b2",
}
SHAPES = (OPENAI_CHAT, PROMPT_LISTS, PLAIN_STRINGS, UNKNOWN_SHAPE)
GROUP = "web-sweep"
# The run contract in the train run: eval episodes at this step, and a trainer's annotations
# saying the episodes of step 1 were trained at step 2 (off-policy) and those of 0 and 2 at once.
EVAL_STEP = 4
EVAL_EPISODES = 2
TRAINED_AT = {0: 0, 1: 2, 2: 2}
TIMED_ROWS = 30  # inference/* rows logged without a step
FAILED_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 42, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory: tried to allocate 2.00 GiB"
)
CONSOLE_LINES = 40  # stdout lines of the train run


@dataclass
class Seeded:
    train: str
    eval: str
    failed: str
    # Per step of the train run: the rewards of its episodes, as logged.
    rewards: dict[int, list[float]]
    long_episode: str
    # Per step of the train run: the episodes as logged (first user message, final answer).
    episodes: dict[int, list[dict[str, Any]]]
    eval_episodes: list[str]


def _clear_run_env() -> None:
    for name in RUN_ENV:
        os.environ.pop(name, None)


def _episode(rng: random.Random, step: int, reward: float, env: str) -> dict[str, Any]:
    episode = make_episode(rng, step, 0.5, "train")
    episode["env"] = {"id": env, "name": env}
    trace = episode["traces"][0]
    trace["reward"] = reward
    trace["rewards"] = {"correct": {"score": reward, "weight": 1.0}}
    return episode


def post_logs(base_url: str, run_id: str, lines: list[dict[str, Any]]) -> None:
    """Console lines as the SDK uploads them (POST /runs/{id}/logs)."""
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    response = httpx.post(
        f"{base_url}/api/v1/runs/{run_id}/logs",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
        timeout=30,
    )
    response.raise_for_status()


def finished_run(http: httpx.Client, name: str, uploads: dict[str, bytes]) -> str:
    """A train run made over the API (`http` at /api/v1) with each upload (kind: NDJSON body)
    stored, then finished; its id."""
    run_id = http.post("/runs", json={"kind": "train", "name": name}).json()["id"]
    for kind, body in uploads.items():
        answer = http.post(f"/runs/{run_id}/{kind}", content=body)
        assert answer.status_code == 200, answer.text
    assert http.post(f"/runs/{run_id}/finish", json={"status": "completed"}).is_success
    return str(run_id)


def seed(base_url: str, local: Path) -> Seeded:
    rng = random.Random(7)
    config = local / "rl.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG_TOML)
    # The SDK's own system metrics and console capture off: the seeded runs are exact.
    common = {
        "base_url": base_url,
        "dir": local,
        "tags": ["web-test"],
        "system_metrics_interval": 0,
        "capture_console": False,
    }

    _clear_run_env()
    train = openruns.init(
        kind="train",
        name="web-train",
        group=GROUP,
        model="Qwen/Qwen3-0.6B",
        environments=["math", "code"],
        config=config,
        training=openruns.TrainingSpec(max_steps=SPIKY_STEPS),
        **common,
    )
    rewards: dict[int, list[float]] = {}
    logged: dict[int, list[dict[str, Any]]] = {}
    long_episode = ""
    with train:
        for step in range(SPIKY_STEPS):
            values: dict[str, Any] = {
                "train": {"grad_norm": SPIKE if step == SPIKE_STEP else 1.0 + 0.1 * math.sin(step)}
            }
            if step < TRAIN_STEPS:
                values["train"]["loss"] = 2.0 * math.exp(-step / 100)
                values["train"]["reward"] = step / TRAIN_STEPS
            if step % 50 == 0 and step < TRAIN_STEPS:
                values["eval/reward"] = step / TRAIN_STEPS / 2
            train.log_metrics(values, step=step)
        for step in range(EPISODE_STEPS):
            rewards[step] = [round(rng.random(), 3) for _ in range(EPISODES_PER_STEP)]
            episodes = [
                _episode(rng, step, r, "math" if i % 2 else "code")
                for i, r in enumerate(rewards[step])
            ]
            if step == 1:
                # One episode with a long answer (folded on its page) that failed.
                long = episodes[0]
                long["traces"][0]["nodes"][-1]["message"]["content"] = LONG_TEXT
                long["ok"] = False
                long["errors"] = [{"type": "TimeoutError", "message": "the sandbox timed out"}]
                long_episode = long["id"]
            logged[step] = episodes
            train.log_episodes(episodes, step=step)
        # Bare traces (the other stream), as a framework without episodes logs them.
        bare = [_episode(rng, 0, 0.5, "math")["traces"][0] for _ in range(BARE_TRACES)]
        train.log_traces(bare, step=0)
        # The run contract: eval episodes inside the train run, a trainer's annotations, rows
        # logged without a step (charted by wall time), console output.
        evals = [_episode(rng, EVAL_STEP, 0.9, "math") for _ in range(EVAL_EPISODES)]
        train.log_episodes(evals, step=EVAL_STEP, kind="eval")
        train.log_annotations(
            {
                "episode_id": e["id"],
                "step": TRAINED_AT[step],
                "producer": "trainer",
                "info": {"advantage": round(e["traces"][0]["reward"] - 0.5, 3)},
            }
            for step in TRAINED_AT
            for e in logged[step]
        )
        for i in range(TIMED_ROWS):
            train.log_metrics({"inference": {"tokens_per_s": 1000.0 + 10 * i}})
            # As the SDK's system metrics are logged (openruns/system.py), without a step.
            train.log_metrics(
                {"system": {"cpu": {"percent": 40.0 + i}, "memory": {"used_percent": 60.0}}}
            )
            time.sleep(0.002)
        post_logs(
            base_url,
            train.id,
            [
                {
                    "ts": time.time(),
                    "stream": "stdout",
                    "line": f"step {i}: loss {2.0 - i / 40:.3f}",
                }
                for i in range(CONSOLE_LINES)
            ]
            + [
                {
                    "ts": time.time(),
                    "stream": "stderr",
                    "line": "warning: the learning rate is high",
                }
            ],
        )
        train.update_summary({"final": {"loss": 2.0 * math.exp(-3), "reward": 0.99}})
    _clear_run_env()

    evaluation = openruns.init(
        kind="eval", name="web-eval", model="Qwen/Qwen3-8B", group=GROUP, **common
    )
    with evaluation:
        for step in range(TRAIN_STEPS):
            evaluation.log_metrics({"train/loss": 1.5 * math.exp(-step / 60)}, step=step)
        evaluation.log_episodes([dict(shape) for shape in SHAPES], step=0)
        evaluation.update_summary({"avg_reward": 0.42})
    _clear_run_env()

    failed = openruns.init(kind="train", name="web-failed", model="Qwen/Qwen3-0.6B", **common)
    failed.log_metrics({"train/loss": 3.0}, step=0)
    post_logs(
        base_url,
        failed.id,
        [
            {"ts": time.time(), "stream": "stdout", "line": "loading the model"},
            {"ts": time.time(), "stream": "traceback", "line": FAILED_TRACEBACK},
        ],
    )
    failed.fail("CUDA out of memory: tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)")
    _clear_run_env()

    eval_ids = [e["id"] for e in evals]
    return Seeded(train.id, evaluation.id, failed.id, rewards, long_episode, logged, eval_ids)
