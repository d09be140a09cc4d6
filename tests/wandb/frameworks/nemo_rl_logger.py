"""
NeMo-RL's W&B calls (NeMo-RL 00617d3 `nemo_rl/utils/logger.py` Logger and WandbLogger): init
with dir, the ray/* step metric of the GPU monitor, `config.update(..., allow_val_change=True)`,
`log_metrics(metrics, step, prefix="train")` with the rollout metrics of
`nemo_rl/experience/rollouts.py` (histograms, and `{agent}/full_result`: a one-column table of
each NeMo Gym verify response as JSON), the GPU monitor's rows with `commit=False`, and
`run.finish()`.
"""

import json
import os

import wandb
from wandb import Histogram, Table

run = wandb.init(project="nemo-tiny", name=os.environ["RUN_NAME"], dir=os.environ["OUT"])
run.define_metric("ray/*", step_metric="ray/ray_step")
hyperparams = {"grpo": {"num_generations_per_prompt": 2}, "policy": {"model_name": "tiny"}}
run.config.update(hyperparams, allow_val_change=True)


def verify_response(step: int, n: int) -> dict:
    answer = {"type": "output_text", "text": str(step * n)}
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"What is {step}*{n}?"}]},
        "response": {"output": [{"type": "message", "role": "assistant", "content": [answer]}]},
        "reward": 1.0 if n == 1 else 0.0,
    }


for step in range(1, 3):
    results = [verify_response(step, n) for n in (1, 2)]
    rewards = [r["reward"] for r in results]
    metrics = {
        "total_reward/mean": sum(rewards) / 2,
        "total_reward/histogram": Histogram(rewards),
        "calculator_agent/full_result": Table(
            data=[[json.dumps(r, separators=(",", ":"))] for r in results], columns=["Full result"]
        ),
    }
    run.log({f"train/{k}": v for k, v in metrics.items()}, step=step)  # prefix="train"
    run.log({"ray/ray_step": step, "ray/node.0.gpu.0.util": 0.5}, commit=False)
print(json.dumps({"id": run.id, "name": run.name}))
run.finish()
