"""What a backend does: the run's lifecycle at one destination (server, directory, nowhere)."""

from __future__ import annotations

from typing import Any, Protocol

from ..spec import RunStatus
from ..upload.pipeline import Sink
from ..upload.stats import Stats

__all__ = ["Backend"]


class Backend(Protocol):
    @property
    def url(self) -> str | None:
        """Where the run can be seen (a page or a directory), if anywhere."""
        ...

    def make_sink(self, stats: Stats) -> Sink:
        """A sink for this process's records (called again in a forked child). A disabled run
        has no pipeline, so nothing asks it for one."""
        ...

    def update(self, summary: dict[str, Any]) -> None:
        """Publish the summary so far (owner only)."""
        ...

    def finalize(
        self,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        losses: dict[str, Any],
        deadline: float | None = None,
    ) -> tuple[RunStatus, str | None] | None:
        """Close the run with a terminal status (owner only), retrying until `deadline`
        (time.monotonic()) where that means anything. When another process closed it first
        with another status: that standing status and its error (the caller reports them)."""
        ...

    def define_metrics(self, axes: dict[str, str | None]) -> None:
        """Store each metric's step metric ({metric: K}; None: the step), issue 19."""
        ...

    def fill(self, fields: dict[str, Any]) -> None:
        """Set metadata (spec.FILLABLE) and `error` on the run where it has none yet: a
        process attached to the run reports them; the owner's unnamed run gets its name."""
        ...

    def reported_error(self) -> str | None:
        """The first fatal error a process attached to the run reported (owner only)."""
        ...

    def close_writer(self, writer_id: str | None, stats: Stats, dropped: int) -> None:
        """Record what this process wrote and lost (owner and attached)."""
        ...

    def close(self) -> None:
        """Release connections; the last call of the run's teardown."""
        ...
