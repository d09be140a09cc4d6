"""
prime-rl's W&B logging through openruns' own W&B monitor (`openruns.monitors`): metrics with
their step (`step` as a metric, the x axis of every other), rows keyed by their time
(inference/*, against `_timestamp`), and finalize (`finish(exit_code=0)`), as prime-rl's
monitor makes them since 559b447 (`src/prime_rl/monitors/wandb/monitor.py`).
"""

import asyncio
import json
import os

from openruns.monitors import Monitors, MonitorsConfig
from openruns.monitors.config import WandbMonitorConfig


async def main() -> None:
    config = MonitorsConfig(
        wandb=WandbMonitorConfig(project="prime-rl-tiny", name=os.environ["RUN_NAME"])
    )
    monitors = Monitors.from_config(config, producer="orchestrator", output_dir=os.environ["OUT"])
    for step in range(3):
        await monitors.log({"reward/mean": step / 2, "seq_len": 100 + step}, step=step)
        await monitors.log({"inference/queue": step})  # a row without a step
    await monitors.finalize()


asyncio.run(main())
print(json.dumps({"name": os.environ["RUN_NAME"]}))
