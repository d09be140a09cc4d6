"""
Run ownership from outside the job: `openruns run` wraps one command (a job step),
`openruns launch` starts several components from a job file. In both, the launcher creates and
owns the run, every child process attaches to it, and the launcher alone closes it with the
launch's real outcome.

This package is imported by the CLI to build its argument parsers: keep it cheap to import.
"""

from __future__ import annotations

__all__ = ["DEFAULT_GRACE_SECONDS"]

# Seconds a child gets to tear down after SIGTERM before SIGKILL. Under SLURM the whole step is
# SIGKILLed KillWait (default 30 s) after its SIGTERM: the grace must end well before that.
DEFAULT_GRACE_SECONDS = 15.0
