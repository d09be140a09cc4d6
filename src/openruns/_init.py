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
from .identity import export_run, inherited_run, new_run_id, nonzero_rank
from .run import Run
from .settings import Settings
from .spec import ConfigSource, TrainingSpec

__all__ = ["init"]

logger = logging.getLogger("openruns")


def init(
    *,
    name: str | None = None,
    kind: str = "eval",
    model: str | None = None,
    environments: Sequence[str | Mapping[str, Any]] | None = None,
    framework: str | None = None,
    description: str | None = None,
    tags: Sequence[str] | None = None,
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
) -> Run:
    """
    Open a run and return it.

        run = openruns.init(kind="eval", model="Qwen/Qwen3-8B", environments=["gsm8k"],
                            config="eval.toml")

    - A new run is created (and owned by this process) unless one is inherited: `id=` attaches
      to that run; a run id exported by another process (`OPENRUNS_RUN_ID`, set by the owner or
      by `openruns run`) is attached to; a process with a non-zero `RANK` / `LOCAL_RANK` only
      ever attaches (without a run to attach to, its run is disabled, with a warning).
    - `config`: a path (stored byte-for-byte with its format), a ConfigSource or a mapping.
    - `mode`: online (a server; default when a base URL is configured), offline (a real run
      written under `dir`, default `./openruns-runs`), disabled (everything accepted and discarded).

    Raises ConfigurationError for invalid arguments or settings, before anything is created.
    """
    if kind not in ("eval", "train"):
        raise ConfigurationError(f"kind must be 'eval' or 'train', got {kind!r}")
    if training is not None:
        if kind != "train":
            raise ConfigurationError("training= is only valid with kind='train'")
        if not isinstance(training, TrainingSpec):
            raise ConfigurationError(
                f"training must be a TrainingSpec, got {type(training).__name__}"
            )
    tags_list = _string_list("tags", tags)
    envs = _environments(environments)
    config_source = ConfigSource.coerce(config)
    if id is not None and (not isinstance(id, str) or not id or "/" in id):
        raise ConfigurationError(f"id must be a non-empty string without '/', got {id!r}")
    settings = Settings.resolve(
        {
            "mode": mode,
            "base_url": base_url,
            "api_key": api_key,
            "team_id": team_id,
            "dir": dir,
            "on_error": on_error,
            "finish_timeout": finish_timeout,
        }
    )

    inherited = inherited_run()
    rank = nonzero_rank()
    attach_id = id or (inherited.id if inherited else None)
    if attach_id is None and rank is not None:
        logger.warning(
            "openruns: %s has no run to attach to (no id= and no OPENRUNS_RUN_ID); "
            "non-zero ranks never create runs, so this process's logging is discarded",
            rank,
        )
        settings = dataclasses.replace(settings, mode="disabled")
    if inherited is not None and id is None:
        kind = inherited.kind or kind

    def opened(run_id: str, backend: Backend, attached: bool, run_dir: Path | None) -> Run:
        return Run(
            run_id=run_id,
            kind=kind,
            name=name,
            settings=settings,
            backend=backend,
            attached=attached,
            config_source=config_source,
            run_dir=run_dir,
        )

    if settings.mode == "disabled":
        run_id = attach_id or f"disabled-{secrets.token_hex(8)}"
        return opened(run_id, DisabledBackend(), attach_id is not None, None)

    if attach_id is not None:
        run_dir = Path(
            inherited.run_dir
            if inherited is not None and inherited.run_dir and attach_id == inherited.id
            else Path(settings.dir) / attach_id
        ).absolute()
        if settings.mode == "online":
            backend: Backend = ServerBackend.attach(settings, attach_id, run_dir)
        else:
            backend = OfflineBackend.attach(run_dir)
        return opened(attach_id, backend, True, run_dir)

    run_id = new_run_id()
    name = name or _default_name(kind, envs, framework, model)
    metadata = {
        "id": run_id,
        "kind": kind,
        "name": name,
        "model": model,
        "environments": envs,
        "framework": framework,
        "description": description,
        "tags": tags_list,
        "config": config_source.to_dict() if config_source else None,
        "training": training.to_dict() if training else None,
        "team_id": settings.team_id,
    }
    run_dir = (Path(settings.dir) / run_id).absolute()
    if settings.mode == "online":
        backend = ServerBackend.create(settings, run_id, run_dir, metadata)
    else:
        backend = OfflineBackend.create(run_dir, metadata)
    run = opened(run_id, backend, False, run_dir)
    export_run(run_id, kind, str(run_dir))
    return run


def _string_list(argument: str, values: Sequence[str] | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ConfigurationError(f"{argument} must be a list of strings, got {values!r}")
    return list(values)


def _environments(values: Sequence[str | Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if values is None:
        return []
    if isinstance(values, (str, Mapping)):
        values = [values]  # type: ignore[list-item]
    out = []
    for value in values:
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
