"""
Who sets a run's final status: the one rule init() follows, as a pure function of what it was
given and what the environment says (docs/decisions.md, "Who sets a run's final status").

    decision = decide(id=None, kind="train", exported=exported_run(), env_ids={...}, rank=None)

- an id from the environment belongs to whoever put it there (seed 000: the launcher, the
  scheduler, the platform, or an earlier init() of this process): a process that finds a run
  exported by *another* process (`OPENRUNS_RUN_ID` with another pid) attaches to it, and so does
  `init(id=X)` when X is the value of `OPENRUNS_RUN_ID` or `RUN_ID` (prime-rl's
  `init(kind="train", id=os.environ["RUN_ID"])`, the monitors): it only flushes;
- an explicit id otherwise is seed 002's: a resume, finalized like an owner, or with
  `kind="train"` prime-rl's contract (a clean finish completes the run, a failure is left to
  whoever created it);
- a non-zero rank only ever attaches; without a run to attach to its logging is discarded;
- otherwise a new run, owned by this process. `RUN_ID` alone is never read: other tools set it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["Decision", "Ownership", "decide"]


class Ownership(enum.Enum):
    """Which final statuses a process sets (run.py's docstring)."""

    OWNER = "owner"  # every status: it created the run, or resumed it with an explicit id=
    COMPLETES = "completes"  # init(kind="train", id=...): only a clean finish (prime-rl's)
    ATTACHED = "attached"  # none: it only flushes its own records


@dataclass(frozen=True)
class Decision:
    run_id: str | None  # None: a new run, its id chosen at create
    ownership: Ownership
    inherited: bool = False  # the run another process exported (its kind and directory apply)
    discard: bool = False  # a non-zero rank with no run to attach to: a disabled run


def decide(
    *,
    id: str | None,
    kind: str,
    exported: str | None,
    env_ids: Collection[str],
    rank: str | None,
) -> Decision:
    """
    `id`: init(id=); `exported`: the run id another process exported (OPENRUNS_RUN_ID with
    another pid or host), else None; `env_ids`: the ids the environment names at all
    (OPENRUNS_RUN_ID and RUN_ID, whoever set them); `rank`: this process's non-zero rank, if any.
    """
    if id is None:
        if exported is not None:
            return Decision(exported, Ownership.ATTACHED, inherited=True)
        if rank is not None:
            return Decision(None, Ownership.OWNER, discard=True)
        return Decision(None, Ownership.OWNER)
    if rank is not None or id in env_ids:
        return Decision(id, Ownership.ATTACHED, inherited=id == exported)
    if kind == "train":
        return Decision(id, Ownership.COMPLETES)
    return Decision(id, Ownership.OWNER)
