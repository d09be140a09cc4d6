"""
`openruns run [options] -- CMD ...`: own a run around one command (a job step).

The command runs in its own process group with the run exported in its environment, so every
process it starts that calls `openruns.init()` attaches to the run (and only flushes). Exit 0
completes the run; exit N fails it with `the command exited with code N` (said plainly:
nothing raised, issue 24) and this command exits N (a process of the command that reported its
fatal error to the run names the failure instead: `RuntimeError: boom (train.py)`). SIGTERM /
SIGINT are forwarded to the command's process group; after its teardown (`--grace` seconds,
then SIGKILL) the run is failed (`terminated by SIGTERM`) or cancelled (SIGINT) and this command
exits 128+N. Wraps a SLURM step as `openruns run ... -- srun ...` (docs/launch.md); inside a
SLURM job the messages are prime-rl's: `RuntimeError: The SLURM job step exited with code N`
and `RuntimeError: SLURM terminated the job`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..settings import DEFAULT_DIR
from . import DEFAULT_GRACE_SECONDS

if TYPE_CHECKING:
    from ..console import PipeTee

__all__ = ["add_arguments", "run"]

PROG = "openruns run"
# After the command's process group is gone its pipes are at EOF; a process that left the
# group and kept them open does not hold up closing the run longer than this.
_TEE_JOIN_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "openruns run [options] -- CMD [ARG ...]"
    parser.add_argument("--name", help="run name (default: derived from the model or kind)")
    parser.add_argument("--kind", choices=("train", "eval"), default="train", help="default train")
    parser.add_argument("--model", help="model the run trains or evaluates (default: none)")
    parser.add_argument(
        "--config", metavar="FILE", help="config file stored with the run (default: none)"
    )
    parser.add_argument(
        "--mode",
        choices=("online", "offline", "disabled"),
        help="default: OPENRUNS_MODE, else online when a server is configured, else offline",
    )
    parser.add_argument("--dir", help=f"where offline runs are written (default: ./{DEFAULT_DIR})")
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="S",
        help="seconds the command gets to tear down after a forwarded signal before SIGKILL "
        f"(default {DEFAULT_GRACE_SECONDS:g}; keep it under SLURM's KillWait)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")


def run(args: argparse.Namespace) -> int:
    from ..errors import OpenrunsError
    from .owner import close_run, launcher_error, open_run, under_slurm
    from .process import describe_exit
    from .supervisor import Supervisor

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(f"{PROG}: no command given (openruns run [options] -- CMD ...)", file=sys.stderr)
        return 2
    try:
        owned = open_run(
            prog=PROG,
            name=args.name,
            kind=args.kind,
            model=args.model,
            config=args.config,
            mode=args.mode,
            dir=args.dir,
        )
    except OpenrunsError as exc:  # bad settings, or the server refused the run
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    step = "The SLURM job step" if under_slurm() else "the command"
    supervisor = Supervisor(args.grace, PROG)
    supervisor.install_signal_handlers()
    # The command's output goes with the run (the Logs tab): read from its pipes here, in
    # another process than the command, and copied to this terminal as it comes. Not by a
    # launcher attached to another's run: the owner's launcher already reads this one's output.
    capture = (
        owned.settings.capture_console and owned.run.mode != "disabled" and not owned.run.attached
    )
    env = owned.child_environment()
    if capture and sys.stdout.isatty():
        env.setdefault("PYTHONUNBUFFERED", "1")  # a pipe would make Python block-buffer
    try:
        child = supervisor.start("job step", command, env=env, pipes=capture)
    except OSError as exc:
        owned.run.fail(launcher_error(f"{step} could not be started: {exc}"))
        print(f"{PROG}: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    tees: list[PipeTee] = []
    if capture:
        from ..console import PipeTee

        emit = owned.run._log_console
        assert child.proc.stdout is not None and child.proc.stderr is not None
        for pipe, fd, stream in (
            (child.proc.stdout, 1, "stdout"),
            (child.proc.stderr, 2, "stderr"),
        ):
            tees.append(PipeTee(pipe, fd, stream, "job step", emit).start())
    outcome = supervisor.supervise()
    for tee in tees:
        tee.join(timeout=_TEE_JOIN_SECONDS)
    failure = None
    if outcome.failed is not None:
        code = outcome.failed.returncode
        assert code is not None
        # "exited with code N", or "was killed by SIGKILL"
        failure = f"{step} {'' if code > 0 else 'was '}{describe_exit(code)}"
    status = close_run(owned, outcome, failure)
    supervisor.restore_signal_handlers()
    return status
