"""
`openruns launch job.toml`: start a job's components, each a process attached to one run.

The launcher creates the run (the job file is its config, byte for byte), starts every
component in its own process group with its output in `<log_dir>/<run id>/<name>.log`, and
supervises them (supervisor.py). The first component to fail fails the run with its name and
code (`Trainer failed with exit code -9`, the code as Popen reports it: -N for
signal N) and the others are stopped; the launcher then exits with that component's status
(128+N for a signal). All components exit 0: the run is completed and the launcher exits 0.
SIGTERM / SIGINT to the launcher: as `openruns run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..console import FileFollower

__all__ = ["add_arguments", "run"]

PROG = "openruns launch"
_TAIL_LINES = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="the job file (TOML; see docs/launch.md)")
    parser.add_argument(
        "--check", action="store_true", help="validate the job file and exit, starting nothing"
    )


def run(args: argparse.Namespace) -> int:
    import orjson

    from ..errors import ConfigurationError, OpenrunsError
    from ..monitors.config import COMPONENT_ENV, MONITORS_ENV
    from .job import load_job
    from .owner import close_run, launcher_error, open_run
    from .supervisor import Supervisor

    try:
        job = load_job(args.job)
    except ConfigurationError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        names = ", ".join(c.name for c in job.components)
        print(f"{PROG}: {args.job} is valid: {names}")
        return 0
    try:
        owned = open_run(
            prog=PROG,
            name=job.run.get("name"),
            kind=job.run.get("kind", "train"),
            model=job.run.get("model"),
            config=str(job.path),
            mode=job.run.get("mode"),
            dir=job.run.get("dir"),
        )
    except OpenrunsError as exc:  # bad settings, or the server refused the run
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    log_dir = job.log_dir / owned.run.id
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        owned.run.fail(launcher_error(f"cannot create the log directory {log_dir}: {exc}"))
        print(f"{PROG}: cannot create the log directory {log_dir}: {exc}", file=sys.stderr)
        return 2
    supervisor = Supervisor(job.grace, PROG)
    supervisor.install_signal_handlers()
    base_env = owned.child_environment()
    # The components' output goes with the run too (the Logs tab), read from their log files.
    follower: FileFollower | None = None
    if owned.settings.capture_console and owned.run.mode != "disabled":
        from ..console import FileFollower

        run = owned.run
        follower = FileFollower(run._log_console, on_skip=run._count_dropped_console).start()
    start_error: str | None = None
    for component in job.components:
        env = {**base_env, **component.env, COMPONENT_ENV: component.name}
        if component.monitors is not None:
            env[MONITORS_ENV] = orjson.dumps(component.monitors.to_mapping()).decode()
        log_path = log_dir / f"{component.name}.log"
        try:
            with log_path.open("ab") as log:
                child = supervisor.start(
                    component.name,
                    component.command,
                    env=env,
                    cwd=component.cwd,
                    stdout=log,
                    log_path=log_path,
                    daemon=component.daemon,
                )
        except OSError as exc:
            start_error = f"{component.title} could not be started: {exc}"
            print(f"{PROG}: {start_error}", file=sys.stderr)
            supervisor.stop()
            break
        if follower is not None:
            follower.follow(component.name, log_path)
        print(f"{PROG}: {component.name}: pid {child.pid}, log {log_path}", file=sys.stderr)
    outcome = supervisor.supervise()
    if follower is not None:
        follower.stop()
    failure = None
    if start_error is not None and outcome.signal is None:
        owned.run.fail(launcher_error(start_error))
        supervisor.restore_signal_handlers()
        return 127
    if outcome.failed is not None:
        failed = outcome.failed
        title = next(c.title for c in job.components if c.name == failed.name)
        failure = f"{title} failed with exit code {failed.returncode}"
        _print_tail(failed.log_path)
    status = close_run(owned, outcome, failure)
    supervisor.restore_signal_handlers()
    return status


def _print_tail(log_path: Path | None) -> None:
    if log_path is None:
        return
    try:
        lines = log_path.read_bytes().decode("utf-8", "replace").splitlines()[-_TAIL_LINES:]
    except OSError:
        return
    if lines:
        print(f"{PROG}: last lines of {log_path}:", file=sys.stderr)
        for line in lines:
            print(f"  | {line}", file=sys.stderr)
