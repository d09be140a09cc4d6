"""
Run identity across processes.

The process that creates a run exports its id with its own pid. Another process (a forked or
spawned child, a launched component) that finds an id exported by a *different* pid attaches to
that run; the exporting process itself, calling init() again, opens a new run. A launcher that
owns a run from outside (`openruns run`) exports the id with its own pid, so every child attaches.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigurationError

__all__ = [
    "COMPAT_RUN_ID_ENV",
    "COMPONENT_ENV",
    "MAX_RUN_ID_CHARS",
    "RUN_DIR_ENV",
    "RUN_HOST_ENV",
    "RUN_ID_ENV",
    "RUN_KIND_ENV",
    "RUN_PID_ENV",
    "RANK_ENVS",
    "RUN_ID_PATTERN",
    "RUN_ID_RULE",
    "InheritedRun",
    "check_run_id",
    "component_name",
    "export_run",
    "inherited_run",
    "invalid_run_id",
    "new_run_id",
    "nonzero_rank",
    "unexport_run",
]

RUN_ID_ENV = "OPENRUNS_RUN_ID"
RUN_PID_ENV = "OPENRUNS_RUN_PID"
RUN_KIND_ENV = "OPENRUNS_RUN_KIND"
RUN_DIR_ENV = "OPENRUNS_RUN_DIR"
RUN_HOST_ENV = "OPENRUNS_RUN_HOST"
# `openruns launch` names each component's process in this variable.
COMPONENT_ENV = "OPENRUNS_COMPONENT"
# Exported beside OPENRUNS_RUN_ID for code written against prime-rl's convention
# (`init(id=os.environ["RUN_ID"])`, which is then an attach: ownership.py). A plain init() never
# reads it, because other tools set RUN_ID too.
COMPAT_RUN_ID_ENV = "RUN_ID"

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case

# The one rule for run ids, the SDK's and the server's (server/store/runs.py imports it): an id
# is a name in URLs, file names (run directories, exports) and command lines, so letters,
# digits, `.`, `_` and `-`, starting with a letter or a digit (never `.`, `..`, a hidden file or
# an option), 1 to 64 characters (the server's column). The pattern is also the API document's.
RUN_ID_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,63}$"
MAX_RUN_ID_CHARS = 64
RUN_ID_RULE = (
    f"1 to {MAX_RUN_ID_CHARS} letters, digits, '.', '_' or '-', starting with a letter or a digit"
)
_RUN_ID = re.compile(RUN_ID_PATTERN)


def invalid_run_id(run_id: object) -> str | None:
    """Why `run_id` is not a valid run id (a message naming the rule), or None when it is."""
    if isinstance(run_id, str) and _RUN_ID.fullmatch(run_id):
        return None
    shown = run_id[:80] if isinstance(run_id, str) else run_id
    return f"run id {shown!r} is not valid: use {RUN_ID_RULE}"


def check_run_id(run_id: object, argument: str) -> str:
    """`run_id`, or ConfigurationError (a ValueError) naming `argument` and the rule."""
    problem = invalid_run_id(run_id)
    if problem is not None:
        raise ConfigurationError(f"{argument}: {problem}")
    assert isinstance(run_id, str)
    return run_id


def new_run_id() -> str:
    """24 characters: 48 bits of milliseconds then 72 random bits, so ids sort by creation."""
    value = (int(time.time() * 1000) & (2**48 - 1)) << 72 | secrets.randbits(72)
    chars = []
    for _ in range(24):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


@dataclass(frozen=True)
class InheritedRun:
    id: str
    kind: str | None
    run_dir: str | None


def inherited_run(environ: Mapping[str, str] | None = None) -> InheritedRun | None:
    """The run exported by another process, or None (nothing exported, or exported by us)."""
    env = os.environ if environ is None else environ
    run_id = env.get(RUN_ID_ENV)
    if not run_id:
        return None
    # The pid alone is not enough: a component in another container or on another node can have
    # the owner's pid (pid 1 is common), so the host must match too.
    if env.get(RUN_PID_ENV) == str(os.getpid()) and env.get(RUN_HOST_ENV) == socket.gethostname():
        return None
    return InheritedRun(run_id, env.get(RUN_KIND_ENV) or None, env.get(RUN_DIR_ENV) or None)


def export_run(
    run_id: str,
    kind: str,
    run_dir: str | None,
    environ: MutableMapping[str, str] | None = None,
) -> None:
    env = os.environ if environ is None else environ
    env[RUN_ID_ENV] = run_id
    env[COMPAT_RUN_ID_ENV] = run_id
    env[RUN_PID_ENV] = str(os.getpid())
    env[RUN_HOST_ENV] = socket.gethostname()
    env[RUN_KIND_ENV] = kind
    if run_dir is None:
        env.pop(RUN_DIR_ENV, None)
    else:
        env[RUN_DIR_ENV] = run_dir


def unexport_run(run_id: str, environ: MutableMapping[str, str] | None = None) -> None:
    """Stop advertising `run_id`, if it is still the exported run."""
    env = os.environ if environ is None else environ
    if env.get(RUN_ID_ENV) != run_id:
        return
    for name in (RUN_ID_ENV, RUN_PID_ENV, RUN_HOST_ENV, RUN_KIND_ENV, RUN_DIR_ENV):
        env.pop(name, None)
    if env.get(COMPAT_RUN_ID_ENV) == run_id:
        env.pop(COMPAT_RUN_ID_ENV, None)


# torchrun sets RANK and LOCAL_RANK; prime-rl sets DP_RANK on its data-parallel workers.
RANK_ENVS = ("RANK", "LOCAL_RANK", "DP_RANK")


def nonzero_rank(environ: Mapping[str, str] | None = None) -> str | None:
    """`RANK=3`, `LOCAL_RANK=1` or `DP_RANK=2` (any non-zero rank) names this process's rank,
    else None."""
    env = os.environ if environ is None else environ
    for name in RANK_ENVS:
        value = env.get(name, "").strip()
        if value and value != "0":
            return f"{name}={value}"
    return None


def component_name() -> str:
    """How this process is named in an error it reports: its `openruns launch` component, else
    its program (`train.py`), else its pid."""
    component = os.environ.get(COMPONENT_ENV)
    if component:
        return component
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return program if program and program != "-c" else f"pid {os.getpid()}"
