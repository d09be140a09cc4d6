"""Monitors: one log() call fanned out to every configured monitor, each on its own thread."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..records import MetricsCleaner, is_episode
from .base import Monitor
from .config import COMPONENT_ENV, MONITOR_TYPES, MonitorsConfig
from .worker import MonitorStats, MonitorWorker

__all__ = ["EVAL_PREFIX", "Monitors"]

# Metrics logged with kind="eval" are keyed under this prefix (prime-rl's `eval/<env>/...`).
EVAL_PREFIX = "eval/"

logger = logging.getLogger("openruns.monitors")

_KINDS = ("train", "eval")
_SUBSETS = ("all", "effective")


class Monitors:
    """
    A trainer's monitors.

        monitors = Monitors.from_config(config, producer="orchestrator", output_dir="outputs")
        await monitors.log({"loss": 0.5}, step=3)
        await monitors.log(episodes, step=3, kind="train", subset="effective")
        await monitors.finalize()

    log() returns once every monitor has queued the call (microseconds, unless a monitor's queue
    is full: then it waits for room, at most a few seconds, without blocking the loop). Each
    monitor does its work on its own thread, so a slow or failing monitor never delays the
    others; a failure is logged with the monitor's name and counted in `stats`, never raised.
    Call finalize() on a clean exit only: a crashed producer leaves its open file chunk to be
    recovered on the next start and its openruns run to the process that owns it.
    """

    def __init__(self, monitors: list[Monitor]):
        self._workers = [MonitorWorker(m) for m in monitors]
        self._cleaner = MetricsCleaner()
        self._finalized = False

    @classmethod
    def from_config(
        cls,
        config: MonitorsConfig | None,
        *,
        producer: str | None = None,
        output_dir: str | os.PathLike[str] = ".",
    ) -> Monitors:
        """
        The monitors `config` turns on. `producer` names this process in shared outputs
        (metrics rows, W&B labels); default `$OPENRUNS_COMPONENT` (set by `openruns launch`),
        else "main". Files go under `output_dir`. Nothing is opened here: each monitor sets
        itself up on its own thread, so a slow `wandb.init` never blocks the caller.
        """
        config = config or MonitorsConfig()
        producer = producer or os.environ.get(COMPONENT_ENV) or "main"
        out = Path(output_dir)
        return cls(
            [
                MONITOR_TYPES[name].build(monitor_config, producer=producer, output_dir=out)
                for name, monitor_config in config.items()
            ]
        )

    @property
    def names(self) -> list[str]:
        return [w.name for w in self._workers]

    @property
    def stats(self) -> dict[str, MonitorStats]:
        """Per monitor: records logged, failed and dropped, and the distinct errors."""
        return {w.name: w.stats for w in self._workers}

    async def log(
        self,
        data: Mapping[str, Any] | Any,
        step: int | None = None,
        kind: str = "train",
        subset: str = "effective",
    ) -> None:
        """
        Log a metrics mapping (nested mappings become `a/b` keys; non-finite values are dropped
        and named), or episodes: one episode or an iterable of them. `step=None` marks a row
        keyed by time only (e.g. periodic system metrics). Metrics logged with `kind="eval"`
        are keyed under `eval/` (unless they already are), so an online eval's metrics never
        mix with the training metrics of the same step.
        """
        if self._finalized:
            raise RuntimeError("Monitors.log() called after finalize()")
        if kind not in _KINDS or subset not in _SUBSETS:
            raise ValueError(f"kind must be one of {_KINDS} and subset one of {_SUBSETS}")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise TypeError(f"step must be an int or None, got {type(step).__name__}")
        if isinstance(data, Mapping) and not is_episode(data):
            values = self._cleaner.clean(data)
            if kind == "eval":
                values = {k if k.startswith(EVAL_PREFIX) else EVAL_PREFIX + k: v
                          for k, v in values.items()}  # fmt: skip
            calls = [w.put("log_metrics", (values, step), 1) for w in self._workers]
        else:
            episodes = _episodes(data)
            if not episodes:
                return
            args = (episodes, step, kind, subset)
            calls = [
                w.put("log_episodes", args, len(episodes))
                for w in self._workers
                if w.monitor.wants_episodes(kind, subset)
            ]
        if len(calls) == 1:
            await calls[0]
        elif calls:
            await asyncio.gather(*calls)

    async def log_annotations(self, annotations: Any) -> None:
        """
        Log later facts about episodes already logged (the step one was trained at, its
        advantage, per-token trainer logprobs), each a mapping with an `episode_id`: see
        `openruns.Run.log_annotations`. Monitors that keep them (file: a stream per producer;
        openruns: the run) get them; the others never see them.
        """
        if self._finalized:
            raise RuntimeError("Monitors.log_annotations() called after finalize()")
        if isinstance(annotations, Mapping):
            annotations = [annotations]
        batch = list(annotations)
        for annotation in batch:
            if not isinstance(annotation, Mapping) or not isinstance(
                annotation.get("episode_id"), str
            ):
                raise TypeError(
                    f"an annotation is a mapping with an episode_id, got {annotation!r}"
                )
        calls = [
            w.put("log_annotations", (batch,), len(batch))
            for w in self._workers
            if w.monitor.wants_annotations()
        ]
        if calls:
            await asyncio.gather(*calls)

    async def finalize(self, timeout: float | None = None) -> None:
        """
        Let every monitor handle what was logged, then flush and close it; monitors finalize
        concurrently. With `timeout`, returns after that many seconds at the latest, naming the
        monitors still working (their threads go on until the process exits).
        """
        if self._finalized:
            return
        self._finalized = True
        futures = {w.name: asyncio.wrap_future(w.close()) for w in self._workers}
        if not futures:
            return
        done, pending = await asyncio.wait(futures.values(), timeout=timeout)
        if pending:
            late = [name for name, f in futures.items() if f in pending]
            logger.warning(
                "openruns monitors: %s did not finish within %.1f s", ", ".join(late), timeout
            )


def _episodes(data: Any) -> list[Any]:
    if isinstance(data, Mapping) or callable(getattr(data, "to_record", None)):
        return [data]
    if callable(getattr(data, "model_dump", None)):
        return [data]
    if isinstance(data, (str, bytes)):
        raise TypeError(f"log() takes a metrics mapping or episodes, got {type(data).__name__}")
    try:
        return list(data)
    except TypeError:
        raise TypeError(
            f"log() takes a metrics mapping or episodes, got {type(data).__name__}"
        ) from None
