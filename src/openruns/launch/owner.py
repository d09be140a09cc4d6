"""
The launcher as the run's owner: open the run, give the children what they need to attach,
close the run with the launch's outcome.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError, ForbiddenError, UnauthorizedError
from ..run import Run
from ..settings import Settings, config_file_path
from ..spec import RunStatus
from .process import exit_status
from .supervisor import Outcome

__all__ = ["OwnedRun", "close_run", "open_run", "under_slurm"]


def under_slurm() -> bool:
    """Whether this launcher runs inside a SLURM job (its messages then say so)."""
    return bool(os.environ.get("SLURM_JOB_ID"))


@dataclass
class OwnedRun:
    run: Run
    settings: Settings

    def child_environment(self) -> dict[str, str]:
        """
        The launcher's environment plus what a child needs to attach to the run: the run id
        (exported by init(): OPENRUNS_RUN_ID, RUN_ID, the owner's pid and the run dir), the mode
        and where runs are written, and for online runs the server and credentials.
        """
        env = dict(os.environ)
        env["OPENRUNS_MODE"] = self.run.mode
        env["OPENRUNS_DIR"] = str(Path(self.settings.dir).absolute())
        if self.run.mode == "online":
            if self.settings.base_url:
                env["OPENRUNS_BASE_URL"] = self.settings.base_url
            # Run credentials go here, and only here: the per-run token the server minted for
            # the owner (it can write to this run and nothing else), else the key the owner
            # resolved (a server without auth mints none).
            key = self.run.token or self.settings.api_key
            if key:
                env["OPENRUNS_API_KEY"] = key
            else:
                env.pop("OPENRUNS_API_KEY", None)
        return env


def open_run(
    *,
    prog: str,
    name: str | None,
    kind: str,
    model: str | None,
    config: str | None,
    mode: str | None,
    dir: str | None,
) -> OwnedRun:
    """
    Create the run this launcher owns. Raises ConfigurationError (bad arguments or settings).
    When the environment already names a run owned by another process (a launcher inside a
    launcher), init() attaches instead: this launcher then supervises without closing the run.
    """
    from .._init import open_run as open_sdk_run

    if config is not None and not Path(config).is_file():
        raise ConfigurationError(f"config file {config!r} does not exist")
    settings = Settings.resolve({"mode": mode, "dir": dir})
    try:
        # No name given: the run stays unnamed until it closes, so a component's own
        # init(name=...) names it first (as its config=, tags=, ... fill what is unset here).
        run = open_sdk_run(
            name=name,
            kind=kind,
            model=model,
            environments=None,
            framework=None,
            description=None,
            tags=None,
            config=config,
            training=None,
            id=None,
            settings_arguments={"mode": mode, "dir": dir},
            name_at_close=True,
        )
    except (UnauthorizedError, ForbiddenError) as exc:
        raise ConfigurationError(
            f"the server at {settings.base_url} refused to create the run ({exc}). It needs "
            f"an API key: create one on the server's host with `openruns keys create --team "
            f"<team>` and set OPENRUNS_API_KEY, or api_key in {config_file_path()}"
        ) from exc
    if run.attached:
        print(
            f"{prog}: attached to run {run.id}, owned by another process, which finishes it",
            file=sys.stderr,
        )
    else:
        where = f" ({run.url})" if run.url else ""
        print(f"{prog}: run {run.id}{where}", file=sys.stderr, flush=True)
    return OwnedRun(run, settings)


def launcher_error(message: str) -> str | BaseException:
    """A failure the launcher tells, not one a process raised: said plainly (issue 24: `openruns
    run -- false` stored `RuntimeError: ...` though nothing raised). Under SLURM the messages
    are prime-rl run_owner's, `RuntimeError: The SLURM job step exited with code N` (its seed)."""
    return RuntimeError(message) if under_slurm() else message


def close_run(owned: OwnedRun, outcome: Outcome, failure: str | None) -> int:
    """
    Finish the run from the launch's outcome and return the launcher's exit status.

    - SIGTERM (or any signal but SIGINT): failed, `terminated by SIGTERM` (under SLURM,
      SIGTERM is the scheduler's: `RuntimeError: SLURM terminated the job`); 128+N.
    - SIGINT: cancelled; 130.
    - a failed child: failed with the fatal error a component reported to the run
      (`RuntimeError: boom (trainer)`), else `<failure>` (the exit code); the failed child's
      status (128+N when it was killed by signal N).
    The launcher's own messages are said plainly (`launcher_error`).
    - otherwise: completed; 0.
    """
    run = owned.run
    if outcome.signal is not None:
        name = signal.Signals(outcome.signal).name
        if outcome.signal == signal.SIGINT:
            run.finish(status=RunStatus.CANCELLED, error=f"terminated by {name}")
        elif outcome.signal == signal.SIGTERM and under_slurm():
            run.fail(RuntimeError("SLURM terminated the job"))  # prime-rl run_owner's words
        else:
            run.fail(launcher_error(f"terminated by {name}"))
        return 128 + outcome.signal
    if outcome.failed is not None:
        assert outcome.failed.returncode is not None
        reported = None if run.attached else run._reported_error()
        run.fail(reported or launcher_error(failure or f"{outcome.failed.name} failed"))
        return exit_status(outcome.failed.returncode)
    run.finish()
    return 0
