"""Disabled runs: every call is accepted and discarded; nothing leaves the process."""

from __future__ import annotations

from typing import Any

from ..spec import RunStatus
from ..upload.pipeline import Sink
from ..upload.stats import Stats

__all__ = ["DisabledBackend"]


class DisabledBackend:
    url: str | None = None

    def make_sink(self, stats: Stats) -> Sink:
        raise RuntimeError("a disabled run has no sink: init() starts no pipeline for it")

    def update(self, summary: dict[str, Any]) -> None:
        pass

    def define_metrics(self, axes: dict[str, str | None]) -> None:
        pass

    def finalize(
        self,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        losses: dict[str, Any],
        deadline: float | None = None,
    ) -> None:
        pass

    def close(self) -> None:
        pass

    def close_writer(self, writer_id: str | None, stats: Stats, dropped: int) -> None:
        pass

    def fill(self, fields: dict[str, Any]) -> None:
        pass

    def reported_error(self) -> str | None:
        return None
