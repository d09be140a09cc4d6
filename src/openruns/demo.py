"""
`openruns demo`: a simulated RL training run (metrics every step, multi-turn episodes with tool
calls, an eval every few steps) and a finished eval run.
"""

from __future__ import annotations

import argparse
import math
import random
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "make_episode", "run", "simulate_eval", "simulate_training"]

ENVS = ("math", "code", "search")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    parser.add_argument("--rollouts", type=int, default=16, help="episodes per step (default 16)")
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between steps (default 0.5)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="server address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="server port (default 8765)")
    parser.add_argument(
        "--data-dir", default=None, help="server data directory (default: the server's default)"
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="no server: write offline runs under --dir (upload them with openruns sync)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="directory of offline runs and spools (default: the dir setting, ./openruns-runs)",
    )
    parser.add_argument(
        "--exit", action="store_true", help="stop the server when the demo runs are done"
    )


def run(args: argparse.Namespace) -> int:
    if args.offline:
        _simulate(args, mode="offline", base_url=None)
        return 0
    from .server import default_data_dir, serve_in_thread

    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    server = serve_in_thread(data_dir=data_dir, host=args.host, port=args.port)
    print(f"openruns server on the embedded store in {data_dir}")
    print(f"dashboard: {server.url}/")
    try:
        _simulate(args, mode="online", base_url=server.url)
        if not args.exit:
            print(f"demo runs done; still serving {server.url}/ (Ctrl-C to stop)")
            while True:
                time.sleep(3600)
    finally:
        server.stop()
    return 0


def _simulate(args: argparse.Namespace, mode: str, base_url: str | None) -> None:
    import openruns

    common = {"mode": mode, "base_url": base_url, "dir": args.dir, "tags": ["demo"]}
    train = openruns.init(
        kind="train",
        name="demo-rl",
        model="Qwen/Qwen3-0.6B",
        environments=list(ENVS),
        framework="openruns-demo",
        training=openruns.TrainingSpec(max_steps=args.steps, batch_size=args.rollouts),
        config={"lr": 1e-6, "rollouts_per_example": args.rollouts, "envs": list(ENVS)},
        **common,
    )
    print(f"training run {train.id}: {train.url}")
    with train:
        simulate_training(train, args.steps, args.rollouts, args.interval)
    evaluation = openruns.init(
        kind="eval", name="demo-eval", model="Qwen/Qwen3-0.6B", environments=["math"], **common
    )
    with evaluation:
        episodes = simulate_eval(evaluation, 64)
        evaluation.update_summary(openruns.metrics.from_episodes(episodes))
    print(f"eval run {evaluation.id}: {evaluation.url}")


def simulate_training(run: Any, steps: int, rollouts: int, interval: float) -> None:
    rng = random.Random(0)
    for step in range(steps):
        progress = step / max(1, steps - 1)
        episodes = [make_episode(rng, step, progress, "train") for _ in range(rollouts)]
        rewards = [e["traces"][0]["reward"] for e in episodes]
        run.log_episodes(episodes, step=step)
        run.log_metrics(
            {
                "train": {
                    "loss": 2.0 * math.exp(-3 * progress) + rng.gauss(0, 0.05),
                    "reward": sum(rewards) / len(rewards),
                    "grad_norm": abs(rng.gauss(1.0, 0.3)) + (5.0 if rng.random() < 0.03 else 0),
                    "lr": 1e-6,
                },
                "time": {"step": interval + rng.random() * 0.1},
            },
            step=step,
        )
        if step % 10 == 0:
            evals = [make_episode(rng, step, progress, "eval") for _ in range(8)]
            run.log_episodes(evals, step=step)
            run.log_metrics(
                {"eval/reward": sum(e["traces"][0]["reward"] for e in evals) / len(evals)},
                step=step,
            )
        time.sleep(interval)


def simulate_eval(run: Any, count: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    episodes = [make_episode(rng, 0, 0.7, "eval") for _ in range(count)]
    run.log_episodes(episodes, step=0)
    return episodes


def make_episode(rng: random.Random, step: int, progress: float, work: str) -> dict[str, Any]:
    """A verifiers-shaped episode: one trace of a multi-turn chat with a tool call."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    correct = rng.random() < 0.2 + 0.7 * progress
    answer = a * b if correct else a * b + rng.randint(1, 9)
    env = rng.choice(ENVS)
    start = time.time()
    messages = [
        {"role": "system", "content": "You are a careful assistant. Use the calculator."},
        {"role": "user", "content": f"What is {a} * {b}? Think step by step."},
        {
            "role": "assistant",
            "content": f"I will compute {a} * {b} with the calculator.",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": f'{{"expr": "{a}*{b}"}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": str(answer)},
        {"role": "assistant", "content": f"The answer is {answer}. " + "Reasoning. " * 20},
    ]
    nodes = [
        {"message": m, "sampled": m["role"] == "assistant", "parent": i - 1 if i else None}
        for i, m in enumerate(messages)
    ]
    tokens_in, tokens_out = rng.randint(80, 400), rng.randint(20, 300)
    reward = 1.0 if correct else 0.0
    return {
        "id": uuid.uuid4().hex,
        "env": {"id": env, "name": env},
        "task": {"type": "Task", "data": {"idx": rng.randint(0, 999), "answer": str(a * b)}},
        "run": {"type": "train", "id": "local", "work": {"type": work, "step": step}},
        "ok": rng.random() > 0.03,
        "traces": [
            {
                "id": uuid.uuid4().hex,
                "agent": {"name": "solver", "trainable": True},
                "tools": [{"name": "calculator", "description": "evaluate an expression"}],
                "nodes": nodes,
                "rewards": {"correct": {"score": reward, "weight": 1.0}},
                "reward": reward,
                "metrics": {"num_turns": 2.0},
                "timing": {"start": start, "agent": {"start": start, "end": start + rng.random()}},
                "num_input_tokens": tokens_in,
                "num_output_tokens": tokens_out,
                "num_total_tokens": tokens_in + tokens_out,
                "is_completed": True,
                "stop_condition": "done",
            }
        ],
        "num_total_tokens": tokens_in + tokens_out,
    }
