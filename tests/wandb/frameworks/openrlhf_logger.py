"""
OpenRLHF's W&B calls (OpenRLHF 3c3be62 `openrlhf/utils/logging_utils.py` WandbLogger): login
when no key is set, init with entity / project / group / name / config and reinit, the
train/* and eval/* step metrics, the generated sample in a copied ["global_step", "text",
"reward"] table logged as `train/generated_samples`, then the train/* metrics with their
global step, and eval/* likewise.
"""

import json
import os

import wandb


class Args:
    """argparse's namespace: logger.wandb.* and training arguments."""

    class logger:
        class wandb:
            key = os.environ["WANDB_API_KEY"]
            org = None
            group = "ppo-sweep"
            project = "openrlhf-tiny"
            run_name = os.environ["RUN_NAME"]

    actor_learning_rate = 5e-7
    n_samples_per_prompt = 4


args = Args()
if not wandb.api.api_key:
    wandb.login(key=args.logger.wandb.key)
wandb.init(
    entity=args.logger.wandb.org,
    project=args.logger.wandb.project,
    group=args.logger.wandb.group,
    name=args.logger.wandb.run_name,
    config={"actor_learning_rate": 5e-7, "n_samples_per_prompt": 4},
    reinit=True,
)
wandb.define_metric("train/global_step")
wandb.define_metric("train/*", step_metric="train/global_step", step_sync=True)
wandb.define_metric("eval/epoch")
wandb.define_metric("eval/*", step_metric="eval/epoch", step_sync=True)
samples_table = wandb.Table(columns=["global_step", "text", "reward"])

for global_step in range(1, 4):  # log_train
    logs = {
        "policy_loss": 0.1 * global_step,
        "reward": global_step / 3,
        "generated_samples": [
            f"Question: {global_step}+1? Answer: {global_step + 1}",
            global_step / 3,
        ],
    }
    generated = logs.pop("generated_samples", None)
    if generated:
        table = wandb.Table(columns=samples_table.columns, data=samples_table.data)
        table.add_data(global_step, *generated)
        samples_table = table
        wandb.log({"train/generated_samples": table})
    wandb.log({f"train/{k}": v for k, v in {**logs, "global_step": global_step}.items()})
# log_eval
wandb.log({f"eval/{k}": v for k, v in {"eval_reward": 0.9, "global_step": 3}.items()})
print(json.dumps({"id": wandb.run.id, "name": wandb.run.name}))
wandb.finish()  # close
