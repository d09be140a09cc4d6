"""
What a monitor is: a destination of a trainer's metrics and episodes.

A monitor's methods are synchronous and run on that monitor's own worker thread (worker.py),
one call at a time and in the order the producer logged, so a monitor may block, encode and
write as it likes: it never runs on the producer's event loop. A method that raises is reported
by the worker (with the monitor's name) and the next call goes on.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Monitor", "PartialFailure", "read_links", "write_link"]

logger = logging.getLogger("openruns.monitors")


class Monitor:
    """Base class: override what the destination takes; the rest are no-ops."""

    name: str = "monitor"

    def wants_episodes(self, kind: str, subset: str) -> bool:
        """Whether this monitor takes episodes of this cohort. Asked on the producer's side, so
        a monitor that does not want them is never handed (and never pins) them."""
        return True

    def wants_annotations(self) -> bool:
        """Whether this monitor keeps annotations (log_annotations)."""
        return False

    def setup(self) -> None:
        """Open the destination (first thing on the worker thread). Raising disables the monitor."""

    def log_metrics(self, values: dict[str, float | int], step: int | None) -> None:
        """One row of flat, finite metrics. `step=None`: a row keyed by time only."""

    def log_episodes(self, episodes: list[Any], step: int | None, kind: str, subset: str) -> None:
        """Episodes (mappings or objects with to_record()/model_dump()) of one cohort."""

    def log_annotations(self, annotations: list[dict[str, Any]]) -> None:
        """Later facts about logged episodes, each a mapping with an `episode_id`."""

    def finalize(self) -> None:
        """Flush and close, after every logged call has been handled."""


def write_link(output_dir: Path, name: str, record: dict[str, Any]) -> None:
    """
    Write `<output_dir>/monitors/<name>/run.json`: where this monitor's run lives (its id and
    URL), for dashboards and scripts to link to. Every process of a launch writes the same
    record, so an atomic replace is enough; a failure is logged, never raised (a link must not
    cost a training run).
    """
    path = output_dir / "monitors" / name / "run.json"
    tmp = path.with_name(f"run.json.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("openruns monitors: cannot write %s: %s", path, exc)


def read_links(output_dir: str | os.PathLike[str], names: list[str]) -> dict[str, Any]:
    """{name: record} of the link records under `output_dir` of the monitors `names` (those
    that wrote none are left out)."""
    out = {}
    for name in names:
        try:
            out[name] = orjson.loads(
                (Path(output_dir) / "monitors" / name / "run.json").read_bytes()
            )
        except (OSError, orjson.JSONDecodeError):
            continue
    return out


class PartialFailure(Exception):
    """Raised by a monitor method when only some records of a call failed."""

    def __init__(self, failed: int, first: BaseException):
        super().__init__(f"{failed} record(s) failed; the first: {type(first).__name__}: {first}")
        self.failed = failed
