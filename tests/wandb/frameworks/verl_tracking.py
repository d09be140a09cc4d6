"""
verl's W&B calls (verl b178a3c `verl/utils/tracking.py`): Tracking's init, `log(data=, step=)`
and `finish(exit_code=0)`, and ValidationGenerationsLogger's table (step, then input_i,
output_i, score_i per sample; copied from the last one and grown by a row, the workaround for
wandb#2981, and logged as `val/generations` at the step), in the order
`verl/trainer/ppo/ray_trainer.py` fit() makes them: a validation at step 0, then every
test_freq steps before that step's metrics.
"""

import json
import os

import wandb

NAME = os.environ["RUN_NAME"]
config = {
    "trainer": {
        "project_name": "verl-tiny",
        "experiment_name": NAME,
        "logger": ["console", "wandb"],
        "log_val_generations": 2,
        "test_freq": 2,
    },
    "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}},
}
settings = None  # Tracking: Settings only with a proxy
if config["trainer"].get("wandb_proxy", None):
    settings = wandb.Settings(https_proxy=config["trainer"]["wandb_proxy"])
entity = os.environ.get("WANDB_ENTITY", None)
wandb.init(project="verl-tiny", name=NAME, entity=entity, config=config, settings=settings)
backends = {"wandb": wandb}


def log(data, step):
    """Tracking.log: every backend with data= and step=."""
    for backend in backends.values():
        backend.log(data=data, step=step)


validation_table = None


def log_generations(samples, step):
    """ValidationGenerationsLogger, the wandb backend."""
    global validation_table
    columns = ["step"]
    for i in range(len(samples)):
        columns += [f"input_{i + 1}", f"output_{i + 1}", f"score_{i + 1}"]
    if validation_table is None:
        validation_table = wandb.Table(columns=columns)
    table = wandb.Table(columns=columns, data=validation_table.data)
    table.add_data(step, *[part for sample in samples for part in sample])
    if wandb.run is not None:
        wandb.log({"val/generations": table}, step=step)
    validation_table = table


def validate(step):
    """_validate: the generations first, then the validation metrics."""
    score = 1.0 if step % 3 == 0 else 0.0
    samples = [(f"user: {n}*{n}?", str(n * n + step % 3), score) for n in (3, 4)]
    log_generations(samples, step)
    log({"val-core/gsm8k/reward/mean@1": score}, step)


validate(0)
for step in range(1, 5):
    if step % config["trainer"]["test_freq"] == 0:
        validate(step)
    log({"actor/pg_loss": 1.0 / step, "critic/score/mean": step / 10, "timing_s/step": 0.1}, step)
print(json.dumps({"id": wandb.run.id, "name": wandb.run.name}))
wandb.finish(exit_code=0)  # Tracking.__del__
