"""
prime-rl's samples tables before #3275 removed them (9975d8868^
`src/prime_rl/utils/monitor/wandb.py`): INCREMENTAL tables of (step, env_name, task, task_idx,
messages, input_ids, reward) and (step, env, task, task_idx, completion, reward), logged with
`"step"` in the row and `*` charted against it.
"""

import json
import os

import wandb

wandb.init(
    project="prime-rl-tiny", name=os.environ["RUN_NAME"], settings=wandb.Settings(mode="online")
)
wandb.define_metric("*", step_metric="step")
samples = wandb.Table(
    columns=["step", "env_name", "task", "task_idx", "messages", "input_ids", "reward"],
    log_mode="INCREMENTAL",
)
evals = wandb.Table(
    columns=["step", "env", "task", "task_idx", "completion", "reward"], log_mode="INCREMENTAL"
)
for step in range(2):
    wandb.log({"reward/mean": 0.5, "step": step})
    for idx in range(2):
        text = (
            f"<|im_start|>user\nReverse: abc{idx}<|im_end|>\n"
            f"<|im_start|>assistant\n{idx}cba<|im_end|>"
        )
        task = json.dumps({"idx": idx, "answer": f"{idx}cba"})
        samples.add_data(step, "reverse-text", task, idx, text, str([1, 2, 3]), 1.0 - idx / 2)
    wandb.log({"samples": samples, "step": step})
evals.add_data(1, "reverse-text-eval", json.dumps({"idx": 0}), 0, "0cba", 1.0)
wandb.log({"eval/samples": evals, "step": 1})
print(json.dumps({"id": wandb.run.id, "name": wandb.run.name}))
wandb.finish(exit_code=0)
