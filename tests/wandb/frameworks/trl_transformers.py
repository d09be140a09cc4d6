"""
transformers' WandbCallback (the real class, transformers 5.24.0
`integrations/integration_utils.py`) driven through transformers' CallbackHandler with the
events and logs Trainer sends it, and TRL's completions table as GRPOTrainer.log logs it
(trl f2cd577 `trl/trainer/grpo_trainer.py`: a DataFrame of step, prompt, completion, one column
per reward function, advantage, and the prompts' images). No torch: the model is what
WandbCallback reads of one.
"""

import json
import os

import numpy as np
import pandas as pd
from transformers import GPT2Config, TrainerControl, TrainerState, TrainingArguments
from transformers.integrations.integration_utils import WandbCallback
from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

import wandb

STEPS = 3


class TinyModel:
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=64)

    def num_parameters(self):
        return 1234


def completions(step: int) -> pd.DataFrame:
    table = {
        "step": [step] * 4,
        "prompt": [f"What is {step}+{i}? (picture {i})" for i in range(4)],
        "completion": [str(step + i) if i % 2 == 0 else "I do not know" for i in range(4)],
        "accuracy_reward": [1.0 if i % 2 == 0 else 0.0 for i in range(4)],
        "format_reward": [0.5] * 4,
        "advantage": [0.5 if i % 2 == 0 else -0.5 for i in range(4)],
    }
    pixels = np.full((6, 6, 3), 40 * step, dtype=np.uint8)
    images = [[wandb.Image(pixels)] if i == 0 else [] for i in range(4)]
    return pd.concat([pd.DataFrame(table), pd.Series(images, name="image")], axis=1, copy=False)


model = TinyModel()
args = TrainingArguments(
    output_dir=os.environ["OUT"],
    run_name=os.environ["RUN_NAME"],
    report_to=["wandb"],
    logging_steps=1,
    max_steps=STEPS,
    learning_rate=1e-5,
)
state, control = TrainerState(), TrainerControl()
state.max_steps = STEPS
handler = CallbackHandler([DefaultFlowCallback(), WandbCallback()], model, None, None, None)
control = handler.on_init_end(args, state, control)
control = handler.on_train_begin(args, state, control)
for step in range(1, STEPS + 1):
    control = handler.on_step_begin(args, state, control)
    state.global_step, state.epoch = step, step / STEPS
    control = handler.on_step_end(args, state, control)
    # GRPOTrainer.log: its metrics through Trainer.log, then the completions table.
    logs = {
        "loss": 1.0 / step,
        "grad_norm": 0.5,
        "learning_rate": 1e-5,
        "reward": step / 4,
        "rewards/accuracy_reward/mean": step / 4,
        "epoch": round(state.epoch, 2),
    }
    state.log_history.append({**logs, "step": state.global_step})
    control = handler.on_log(args, state, control, logs=logs)
    wandb.log({"completions": wandb.Table(dataframe=completions(step))})
# The evaluation's metrics, then train()'s last log, then the end of training.
control = handler.on_evaluate(args, state, control, metrics={"eval_loss": 0.25})
control = handler.on_log(args, state, control, logs={"eval_loss": 0.25, "epoch": 1.0})
last = {"train_runtime": 1.5, "train_loss": 0.6, "train_samples_per_second": 8.0, "epoch": 1.0}
control = handler.on_log(args, state, control, logs=last)
control = handler.on_train_end(args, state, control)
print(json.dumps({"id": wandb.run.id, "name": wandb.run.name, "project": wandb.run.project}))
wandb.finish()
