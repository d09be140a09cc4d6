"""
A run the unmodified W&B SDK logs, for the browser tests of its media: at steps 1 and 2 a
TRL-shaped completions table (its rows become episodes; one prompt has a picture), a table of
other numbers (kept and shown as a table), a picture in the history, and a loss.
"""

import json
import os

import numpy as np
import pandas as pd

import wandb

run = wandb.init(project="web-wandb", name=os.environ["RUN_NAME"])
for step in (1, 2):
    pixels = np.zeros((16, 16, 3), dtype=np.uint8)
    pixels[..., step % 3] = 200
    completions = pd.DataFrame(
        {
            "step": [step, step],
            "prompt": [f"Describe picture {step}", "Count to 3"],
            "completion": ["a coloured square", "1 2 3"],
            "accuracy_reward": [1.0, 0.0],
            "advantage": [0.5, -0.5],
        }
    )
    images = pd.Series([[wandb.Image(pixels, caption=f"picture {step}")], []], name="image")
    confusion = [["cat", 0.9, 0.8 + step / 100], ["dog", 0.7, 0.6]]
    run.log(
        {
            "train/loss": 1.0 / step,
            "completions": wandb.Table(dataframe=pd.concat([completions, images], axis=1)),
            "eval/confusion": wandb.Table(columns=["label", "precision", "recall"], data=confusion),
            "samples/pic": wandb.Image(pixels, caption=f"step {step}"),
        },
        step=step,
    )
print(json.dumps({"id": run.id, "name": run.name}))
run.finish()
