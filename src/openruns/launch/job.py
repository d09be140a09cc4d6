"""
The job file of `openruns launch`: one run, several components.

    [run]                          # the run the launcher owns (every key optional)
    name = "reverse-text"
    kind = "train"                 # train | eval
    model = "Qwen/Qwen3-0.6B"
    mode = "offline"               # online | offline | disabled (default: settings)
    dir = "openruns-runs"          # offline runs (default: settings)

    [launch]
    log_dir = "logs"               # component logs: <log_dir>/<run id>/<component>.log
    grace = 15.0                   # seconds between SIGTERM and SIGKILL when stopping

    [monitors.file]                # shared monitors: fill every component's monitors
    chunk_bytes = 1073741824

    [[component]]
    name = "inference"
    command = "vllm serve Qwen/Qwen3-0.6B"      # a string is split like a shell would
    daemon = true                  # not waited for: stopped once the others are done

    [[component]]
    name = "trainer"
    command = ["python", "-m", "trainer", "@", "trainer.toml"]
    env = { CUDA_VISIBLE_DEVICES = "0" }
    cwd = "."                      # relative paths are relative to where the launcher runs
    [component.monitors.wandb]     # this component's own monitors (merged with [monitors])
    project = "rl"

Everything is validated before anything starts: unknown keys, duplicate names, and monitors set
differently in `[monitors]` and a component are errors that name the place.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..identity import (
    COMPAT_RUN_ID_ENV,
    RUN_DIR_ENV,
    RUN_HOST_ENV,
    RUN_ID_ENV,
    RUN_KIND_ENV,
    RUN_PID_ENV,
)
from ..monitors.config import COMPONENT_ENV, MONITORS_ENV, MonitorsConfig, merge_monitors
from . import DEFAULT_GRACE_SECONDS

__all__ = ["Component", "Job", "load_job"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Set by the launcher for every component; a component may not override them.
PROTECTED_ENV = (
    RUN_ID_ENV,
    COMPAT_RUN_ID_ENV,
    RUN_PID_ENV,
    RUN_HOST_ENV,
    RUN_KIND_ENV,
    RUN_DIR_ENV,
    MONITORS_ENV,
    COMPONENT_ENV,
)
_TOP_KEYS = {"run", "launch", "monitors", "component"}
_RUN_KEYS = {"name", "kind", "model", "mode", "dir"}
_LAUNCH_KEYS = {"log_dir", "grace"}
_COMPONENT_KEYS = {"name", "command", "env", "cwd", "daemon", "monitors"}


@dataclass(frozen=True)
class Component:
    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    daemon: bool = False
    monitors: MonitorsConfig | None = None  # None: neither [monitors] nor its own were set

    @property
    def title(self) -> str:
        """The name as an error message starts it: `trainer` -> `Trainer` (vLLM stays vLLM)."""
        return self.name[:1].upper() + self.name[1:]


@dataclass(frozen=True)
class Job:
    path: Path
    run: dict[str, Any]
    log_dir: Path
    grace: float
    components: tuple[Component, ...]


def load_job(path: str | os.PathLike[str]) -> Job:
    """Read and validate a job file. Raises ConfigurationError naming the file and the key."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path}: invalid TOML: {exc}") from exc
    where = str(path)
    _known(data, _TOP_KEYS, where)
    run = _table(data.get("run"), f"{where} [run]")
    _known(run, _RUN_KEYS, f"{where} [run]")
    for key, value in run.items():
        if not isinstance(value, str):
            raise ConfigurationError(f"{where} [run].{key} must be a string, got {value!r}")
    if run.get("kind", "train") not in ("train", "eval"):
        raise ConfigurationError(f"{where} [run].kind must be train or eval, got {run['kind']!r}")
    launch = _table(data.get("launch"), f"{where} [launch]")
    _known(launch, _LAUNCH_KEYS, f"{where} [launch]")
    grace = launch.get("grace", DEFAULT_GRACE_SECONDS)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        raise ConfigurationError(f"{where} [launch].grace must be seconds >= 0, got {grace!r}")
    log_dir = launch.get("log_dir", "logs")
    if not isinstance(log_dir, str) or not log_dir:
        raise ConfigurationError(f"{where} [launch].log_dir must be a path, got {log_dir!r}")
    shared = data.get("monitors")
    if shared is not None:
        MonitorsConfig.from_mapping(_table(shared, f"{where} [monitors]"), f"{where} [monitors]")
    raw_components = data.get("component")
    if not isinstance(raw_components, list) or not raw_components:
        raise ConfigurationError(f"{where}: no [[component]]: a job needs at least one")
    components = [_component(c, i, shared, where) for i, c in enumerate(raw_components)]
    names = [c.name for c in components]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(f"{where}: component names must be unique: {duplicates}")
    if all(c.daemon for c in components):
        raise ConfigurationError(
            f"{where}: every component is a daemon; at least one must be waited for"
        )
    return Job(path, dict(run), Path(log_dir), float(grace), tuple(components))


def _component(raw: Any, i: int, shared: Any, where: str) -> Component:
    here = f"{where} [[component]] #{i + 1}"
    table = _table(raw, here)
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{here}: name must be letters, digits, '.', '_' or '-' (it names the log file), "
            f"got {name!r}"
        )
    here = f'{where} [[component]] "{name}"'
    _known(table, _COMPONENT_KEYS, here)
    command = table.get("command")
    if isinstance(command, str):
        argv = shlex.split(command)
    elif isinstance(command, list) and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise ConfigurationError(f"{here}: command must be a string or a list of strings")
    if not argv:
        raise ConfigurationError(f"{here}: command is empty")
    env = _table(table.get("env"), f"{here} env")
    clean_env: dict[str, str] = {}
    for key, value in env.items():
        if key in PROTECTED_ENV:
            raise ConfigurationError(
                f"{here}: env may not set {key}: the launcher sets it for every component"
            )
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigurationError(f"{here}: env.{key} must be a string, got {value!r}")
        clean_env[key] = str(value)
    cwd = table.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigurationError(f"{here}: cwd must be a path, got {cwd!r}")
    daemon = table.get("daemon", False)
    if not isinstance(daemon, bool):
        raise ConfigurationError(f"{here}: daemon must be true or false, got {daemon!r}")
    own = table.get("monitors")
    monitors = None
    if shared is not None or own is not None:
        monitors = merge_monitors(
            shared, own, shared_where=f"{where} [monitors]", own_where=f"{here} monitors"
        )
    return Component(name, tuple(argv), clean_env, cwd, daemon, monitors)


def _table(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where} must be a table, got {value!r}")
    return value


def _known(table: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigurationError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
