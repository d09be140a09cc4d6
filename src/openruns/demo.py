"""
`openruns demo`: a small sweep of simulated RL runs to watch live, and an eval.

- an eval run (kind eval), finished first;
- three training runs in one group (`demo-sweep`), differing in learning rate so the compare
  view has something to show, each in a process of its own (spawned, so each captures its own
  console and samples its own system metrics), all live together for ~2 minutes (`--steps`):
  metrics every step, episodes with tool calls every step and eval episodes (kind eval) every
  ten, a "trainer" producer's annotations saying at which step each episode was trained (a
  quarter of them one step late: off-policy), inference metrics logged without a step (charted
  by wall time), system metrics, and console output;
- the run with the highest learning rate diverges and fails with a traceback.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "make_episode", "run", "simulate_eval", "simulate_training"]

ENVS = ("math", "code", "search")
GROUP = "demo-sweep"
# Learning rates of the sweep; the last one diverges.
SWEEP = (1e-6, 3e-6, 3e-5)
DIVERGES_AT = 0.6  # of the steps, for the last learning rate
SYSTEM_METRICS_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps", type=int, default=120, help="training steps of each run (default 120)"
    )
    parser.add_argument("--rollouts", type=int, default=16, help="episodes per step (default 16)")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between steps (default 1.0: about two minutes)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="server address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="server port (default 8765)")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="server data directory, kept (default: a throwaway demo directory under the "
        "system's temporary directory, removed when the demo stops; never the server's own)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="no server: write offline runs under --dir (upload them with openruns sync)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="directory of offline runs and spools (default: with --offline the dir setting, "
        "./openruns-runs; else the throwaway demo directory)",
    )
    parser.add_argument(
        "--exit", action="store_true", help="stop the server when the demo runs are done"
    )


def run(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.rollouts < 1 or args.interval < 0:
        print("openruns demo: --steps and --rollouts must be positive, --interval not negative")
        return 2
    if args.offline:
        _simulate(args, mode="offline", base_url=None)
        return 0
    from .server import serve_in_thread
    from .server.config import ServerConfigError

    # The demo's runs go to a store of their own, not the user's real one (issue 24); the
    # online runs leave no directory behind once delivered, and their spools live here too.
    scratch = Path(tempfile.mkdtemp(prefix="openruns-demo-"))
    data_dir = Path(args.data_dir) if args.data_dir else scratch / "data"
    if args.dir is None:
        args.dir = str(scratch / "runs")
    try:
        try:
            server = serve_in_thread(data_dir=data_dir, host=args.host, port=args.port)
        except ServerConfigError as exc:  # a port in use: one line, as `openruns server` says
            print(f"openruns demo: {exc} (another port: --port N)", file=sys.stderr)
            return 2
        kept = "" if args.data_dir else " (a demo store, removed when the demo stops)"
        print(f"openruns server on the embedded store in {data_dir}{kept}")
        print(f"dashboard: {server.url}/")
        try:
            _simulate(args, mode="online", base_url=server.url)
            if not args.exit:
                print(f"demo runs done; still serving {server.url}/ (Ctrl-C to stop)")
                while True:
                    time.sleep(3600)
        finally:
            server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _simulate(args: argparse.Namespace, mode: str, base_url: str | None) -> None:
    import multiprocessing

    import openruns

    common = {"mode": mode, "base_url": base_url, "dir": args.dir, "tags": ["demo"]}
    # The eval first and closed, so no run is exported to the sweep's processes.
    evaluation = openruns.init(
        kind="eval",
        name="demo-eval",
        model="Qwen/Qwen3-0.6B",
        environments=["math"],
        system_metrics_interval=0,
        **common,
    )
    with evaluation:
        episodes = simulate_eval(evaluation, 64)
        evaluation.update_summary(openruns.metrics.from_episodes(episodes))
    print(f"eval run {evaluation.id}: {evaluation.url}")

    # Spawned, not forked: a fresh interpreter per run (the server's threads stay here).
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=_train_worker,
            args=(lr, i == len(SWEEP) - 1, args.steps, args.rollouts, args.interval, common),
            name=f"demo-lr{lr:g}",
        )
        for i, lr in enumerate(SWEEP)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [w.name for w in workers if w.exitcode]
    if failed:
        print(f"as planned, {', '.join(failed)} failed (its traceback is on its run's Logs tab)")


def _train_worker(
    lr: float, diverges: bool, steps: int, rollouts: int, interval: float, common: dict[str, Any]
) -> None:
    import openruns

    name = f"demo-rl-lr{lr:g}"
    train = openruns.init(
        kind="train",
        name=name,
        group=GROUP,
        model="Qwen/Qwen3-0.6B",
        environments=list(ENVS),
        framework="openruns-demo",
        training=openruns.TrainingSpec(max_steps=steps, batch_size=rollouts),
        config={"lr": lr, "rollouts_per_example": rollouts, "envs": list(ENVS)},
        system_metrics_interval=SYSTEM_METRICS_SECONDS,
        **common,
    )
    print(f"{name}: training run {train.id}: {train.url}", flush=True)
    fail_at = int(DIVERGES_AT * steps) if diverges else None
    with train:  # an exception fails the run with its traceback, and ends this process
        simulate_training(train, steps, rollouts, interval, lr=lr, fail_at=fail_at)


def simulate_training(
    run: Any,
    steps: int,
    rollouts: int,
    interval: float,
    *,
    lr: float = 1e-6,
    fail_at: int | None = None,
) -> None:
    """One simulated training run; raises FloatingPointError at step `fail_at`."""
    rng = random.Random(int(lr * 1e9))
    speed = 1.0 + math.log10(lr / 1e-6)  # a higher learning rate learns faster (until it breaks)
    name = run.name or run.id
    for step in range(steps):
        progress = min(1.0, speed * step / max(1, steps - 1))
        episodes = [make_episode(rng, step, progress, "train") for _ in range(rollouts)]
        rewards = [e["traces"][0]["reward"] for e in episodes]
        loss = 2.0 * math.exp(-3 * progress) + rng.gauss(0, 0.05)
        if fail_at is not None and step >= fail_at - 5:
            loss *= 3.0 ** (step - fail_at + 6)  # the loss blows up before the NaN
        run.log_episodes(episodes, step=step)
        run.log_metrics(
            {
                "train": {
                    "loss": loss,
                    "reward": sum(rewards) / len(rewards),
                    "grad_norm": abs(rng.gauss(1.0, 0.3)) + (5.0 if rng.random() < 0.03 else 0),
                    "lr": lr,
                },
                "time": {"step": interval + rng.random() * 0.1},
            },
            step=step,
        )
        # The trainer's view: most episodes trained at the step they were dispatched at, a
        # quarter one step late (off-policy), as an asynchronous RL trainer reports them.
        run.log_annotations(
            {
                "episode_id": e["id"],
                "step": step + (1 if rng.random() < 0.25 else 0),
                "producer": "trainer",
                "info": {"advantage": round(e["traces"][0]["reward"] - sum(rewards) / rollouts, 3)},
            }
            for e in episodes
        )
        # Inference server figures come every few seconds, not per step: no step.
        if step % 2 == 0:
            run.log_metrics(
                {
                    "inference": {
                        "tokens_per_s": 1800 + 400 * math.sin(step / 7) + rng.gauss(0, 60),
                        "queue_depth": max(0, rng.gauss(8, 3)),
                    }
                }
            )
        if step % 10 == 0:
            evals = [make_episode(rng, step, progress, "eval") for _ in range(8)]
            run.log_episodes(evals, step=step, kind="eval")
            eval_reward = sum(e["traces"][0]["reward"] for e in evals) / len(evals)
            run.log_metrics({"eval": {"math": {"reward": eval_reward}}}, step=step)
            print(f"{name}: step {step}: eval reward {eval_reward:.3f}", flush=True)
        print(f"{name}: step {step}: loss {loss:.4f} reward {sum(rewards) / rollouts:.3f}")
        if rng.random() < 0.05:
            print(
                f"{name}: warning: step {step} had {rng.randint(1, 3)} timed-out rollouts",
                file=sys.stderr,
            )
        if fail_at is not None and step == fail_at:
            _check_finite(loss * math.nan, step, lr)
        time.sleep(interval)


def _check_finite(loss: float, step: int, lr: float) -> None:
    if math.isnan(loss):
        raise FloatingPointError(
            f"loss is NaN at step {step}: the learning rate {lr:g} is too high for this model"
        )


def simulate_eval(run: Any, count: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    episodes = [make_episode(rng, 0, 0.7, "eval") for _ in range(count)]
    run.log_episodes(episodes, step=0)
    for i, episode in enumerate(episodes[:5]):
        print(f"eval {i}: reward {episode['traces'][0]['reward']}")
    return episodes


def make_episode(rng: random.Random, step: int, progress: float, work: str) -> dict[str, Any]:
    """A verifiers-shaped episode: one trace of a multi-turn chat with a tool call."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    correct = rng.random() < 0.2 + 0.7 * progress
    answer = a * b if correct else a * b + rng.randint(1, 9)
    env = rng.choice(ENVS)
    start = time.time()
    messages: list[dict[str, Any]] = [
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
