"""init(): open a run, or attach to one, from arguments, environment and settings."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .backends.base import Backend
from .backends.disabled import DisabledBackend
from .backends.offline import OfflineBackend
from .backends.server import ServerBackend
from .errors import ConfigurationError
from .identity import (
    COMPAT_RUN_ID_ENV,
    RUN_ID_ENV,
    check_run_id,
    export_run,
    inherited_run,
    new_run_id,
    nonzero_rank,
)
from .ownership import Ownership, decide
from .run import Run
from .settings import Settings
from .settings import traces_opt_out as resolve_traces_opt_out
from .spec import ConfigSource, EnvironmentRef, TrainingSpec

__all__ = ["init", "open_run"]

logger = logging.getLogger("openruns")


def init(
    *,
    name: str | None = None,
    kind: str = "eval",
    model: str | None = None,
    environments: Sequence[str | Mapping[str, Any] | EnvironmentRef] | None = None,
    framework: str | None = None,
    description: str | None = None,
    tags: Sequence[str] | None = None,
    group: str | None = None,
    project: str | None = None,
    config: str | os.PathLike[str] | ConfigSource | Mapping[str, Any] | None = None,
    training: TrainingSpec | None = None,
    id: str | None = None,
    team_id: str | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
    mode: str | None = None,
    dir: str | os.PathLike[str] | None = None,
    on_error: str | None = None,
    finish_timeout: float | None = None,
    traces_opt_out: bool | None = None,
    system_metrics_interval: float | None = None,
    capture_console: bool | None = None,
) -> Run:
    """
    Open a run and return it.

        run = openruns.init(kind="eval", model="Qwen/Qwen3-8B", environments=["gsm8k"],
                            config="eval.toml")

    Which run, and who sets its final status (ownership.decide, the one rule):
    - an id from the environment belongs to whoever put it there. A run exported by another
      process (`OPENRUNS_RUN_ID`, set by the process that created it, by `openruns run` /
      `openruns launch`, or by a scheduler after `openruns runs create`) is attached to, and so
      is `id=X` when X is the value of `OPENRUNS_RUN_ID` or `RUN_ID` (a platform that passes
      only `RUN_ID` to each pod; prime-rl's `init(kind="train", id=os.environ["RUN_ID"])`):
      this process only flushes its records, and reports its fatal error for the owner; its
      `name=`, `config=`, `tags=`, ... fill in what the owner left unset;
    - any other `id=` resumes that run (creating it when it does not exist, reopening it when it
      ended): this process then finishes it as its owner. With `kind="train"` it follows
      prime-rl's contract instead: nothing is registered, a clean finish() completes the run,
      and a failure is logged and left to the launcher or scheduler that created it;
    - a process with a non-zero `RANK` / `LOCAL_RANK` / `DP_RANK` only ever attaches (without a
      run to attach to, its run is disabled, with a warning);
    - otherwise a new run is created and owned by this process (`RUN_ID` alone is not read).

    `config`: a path (stored byte-for-byte with its format), a ConfigSource or a mapping.
    `group`: a name shared by the runs of one experiment (the dashboard groups by it).
    `project`: the project the run belongs to (default `default`; W&B's project, issue 19);
    the runs page and `Client().runs(project=)` filter by it.
    `mode`: online (a server; default when a base URL is configured), offline (a real run
    written under `dir`, default `./openruns-runs`), disabled (everything accepted and
    discarded). `traces_opt_out` (and `PRIME_TRACES_OPT_OUT`): prime-runs' opt-out of Prime
    Traces, validated as prime-runs does and otherwise without effect: episodes always go to the
    openruns server (docs/prime-runs.md). `system_metrics_interval` (seconds, 0: off) and
    `capture_console`: the system metrics and console output kept with the run (Settings).

    Raises ConfigurationError for invalid arguments or settings, before anything is created.
    """
    return open_run(
        name=name,
        kind=kind,
        model=model,
        environments=environments,
        framework=framework,
        description=description,
        tags=tags,
        group=group,
        project=project,
        config=config,
        training=training,
        id=id,
        traces_opt_out=traces_opt_out,
        settings_arguments={
            "mode": mode,
            "base_url": base_url,
            "api_key": api_key,
            "team_id": team_id,
            "dir": dir,
            "on_error": on_error,
            "finish_timeout": finish_timeout,
            "system_metrics_interval": system_metrics_interval,
            "capture_console": capture_console,
        },
    )


def open_run(
    *,
    name: str | None,
    kind: str,
    model: str | None,
    environments: Sequence[str | Mapping[str, Any] | EnvironmentRef] | None,
    framework: str | None,
    description: str | None,
    tags: Sequence[str] | None,
    config: str | os.PathLike[str] | ConfigSource | Mapping[str, Any] | None,
    training: TrainingSpec | None,
    id: str | None,
    settings_arguments: Mapping[str, Any],
    traces_opt_out: bool | None = None,
    name_at_close: bool = False,
    group: str | None = None,
    project: str | None = None,
) -> Run:
    """init(), with one more choice for launchers: `name_at_close` leaves an unnamed run
    without a name until it closes (so a component's init(name=...) can name it first)."""
    if kind not in ("eval", "train"):
        raise ConfigurationError(f"kind must be 'eval' or 'train', got {kind!r}")
    if training is not None:
        if kind != "train":
            raise ConfigurationError("training= is only valid with kind='train'")
        if not isinstance(training, TrainingSpec):
            raise ConfigurationError(
                f"training must be a TrainingSpec, got {type(training).__name__}"
            )
    for argument, value in (
        ("name", name),
        ("model", model),
        ("framework", framework),
        ("description", description),
    ):  # checked here, as kind is, rather than sent for the server to refuse (issue 24)
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(
                f"{argument} must be a string, got {type(value).__name__} {value!r}"
            )
    tags_list = _string_list("tags", tags)
    if group is not None and (not isinstance(group, str) or not group or len(group) > 256):
        raise ConfigurationError(f"group must be a string of 1 to 256 characters, got {group!r}")
    _check_project(project)
    envs = _environments(environments)
    config_source = ConfigSource.coerce(config)
    if id is not None:
        from_env = " (the value of RUN_ID)" if id == os.environ.get(COMPAT_RUN_ID_ENV) else ""
        check_run_id(id, f"id{from_env}")
    settings = Settings.resolve(settings_arguments)
    if settings.mode != "disabled":  # as prime-runs: checked unless the run is disabled
        resolve_traces_opt_out(traces_opt_out)
    metadata: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "model": model,
        "environments": envs,
        "framework": framework,
        "description": description,
        "tags": tags_list,
        "group": group,
        "project": project,
        "config": config_source.to_dict() if config_source else None,
        "training": training.to_dict() if training else None,
    }

    inherited = inherited_run()
    if inherited is not None and id is None:  # the id this process attaches to
        check_run_id(inherited.id, RUN_ID_ENV)
    rank = nonzero_rank()
    env_ids = {v for v in (os.environ.get(RUN_ID_ENV), os.environ.get(COMPAT_RUN_ID_ENV)) if v}
    decision = decide(
        id=id,
        kind=kind,
        exported=inherited.id if inherited is not None else None,
        env_ids=env_ids,
        rank=rank,
    )
    run_id, ownership = decision.run_id, decision.ownership
    if decision.discard:
        logger.warning(
            "openruns: %s has no run to attach to (no id= and no OPENRUNS_RUN_ID); "
            "non-zero ranks never create runs, so this process's logging is discarded",
            rank,
        )
        settings = dataclasses.replace(settings, mode="disabled")
    if decision.inherited and inherited is not None:
        kind = inherited.kind or kind
    default_name = None
    if ownership is Ownership.OWNER and not name:
        derived = _default_name(kind, envs, framework, model)
        if name_at_close:
            default_name = derived
        else:
            metadata["name"] = derived

    def opened(run_id: str, backend: Backend, run_dir: Path | None) -> Run:
        run = Run(
            run_id=run_id,
            kind=kind,
            name=metadata["name"],
            settings=settings,
            backend=backend,
            ownership=ownership,
            config_source=config_source,
            run_dir=run_dir,
            default_name=default_name,
        )
        if ownership is not Ownership.OWNER:
            given = {k: v for k, v in metadata.items() if k != "kind" and v not in (None, [])}
            if given:
                run._fill(given)
        return run

    if settings.mode == "disabled":
        run_id = run_id or f"disabled-{secrets.token_hex(8)}"
        return opened(run_id, DisabledBackend(), None)

    if ownership is not Ownership.OWNER:
        assert run_id is not None
        run_dir = Path(
            inherited.run_dir
            if decision.inherited and inherited is not None and inherited.run_dir
            else Path(settings.dir) / run_id
        ).absolute()
        if settings.mode == "online":
            backend: Backend = ServerBackend.attach(settings, run_id, run_dir)
        else:
            backend = OfflineBackend.attach(run_dir)
        return opened(run_id, backend, run_dir)

    resume = run_id is not None
    run_id = run_id or new_run_id()
    metadata.update(id=run_id, team_id=settings.team_id)
    if resume:
        metadata["resume"] = True  # an existing run is reopened, a missing one created
    run_dir = (Path(settings.dir) / run_id).absolute()
    if settings.mode == "online":
        backend = ServerBackend.create(settings, run_id, run_dir, metadata)
    else:
        backend = OfflineBackend.create(run_dir, metadata)
        # Said once, so an offline run is never a silent one (issue 24).
        logger.warning(
            "openruns: run %s is offline, written to %s; upload it to a server with: "
            "openruns sync %s",
            run_id,
            run_dir,
            run_dir,
        )
    run = opened(run_id, backend, run_dir)
    export_run(run_id, kind, str(run_dir))
    return run


def _string_list(argument: str, values: Sequence[str] | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ConfigurationError(f"{argument} must be a list of strings, got {values!r}")
    return list(values)


def _environments(
    values: Sequence[str | Mapping[str, Any] | EnvironmentRef] | None,
) -> list[dict[str, Any]]:
    if values is None:
        return []
    if isinstance(values, (str, Mapping, EnvironmentRef)):
        values = [values]
    out = []
    for value in values:
        if isinstance(value, EnvironmentRef):
            value = value.to_dict()
        if isinstance(value, str) and value:
            out.append({"name": value})
        elif isinstance(value, Mapping) and any(value.get(k) for k in ("name", "id", "slug")):
            out.append({k: v for k, v in value.items() if v is not None})
        else:
            raise ConfigurationError(
                f"environments: each entry must be a name or a mapping with name/id/slug, "
                f"got {value!r}"
            )
    return out


def _default_name(
    kind: str, envs: list[dict[str, Any]], framework: str | None, model: str | None
) -> str:
    if envs:
        base = envs[0].get("name") or envs[0].get("slug") or envs[0].get("id")
    elif kind == "train" and model:
        base = model.rsplit("/", 1)[-1]
    else:
        base = framework or kind
    return f"{base}-{secrets.token_hex(4)}"


def _check_project(project: object) -> None:
    """A project is 1 to 256 characters without "/" or control characters (the server's
    rule: it is a path segment of the W&B wire's URLs)."""
    if project is None:
        return
    if (
        not isinstance(project, str)
        or not 0 < len(project) <= 256
        or any(c == "/" or ord(c) < 32 for c in project)
    ):
        raise ConfigurationError(
            f"project must be a string of 1 to 256 characters without '/', got {project!r}"
        )
