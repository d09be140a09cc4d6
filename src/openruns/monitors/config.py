"""
Monitor configuration: small frozen dataclasses, read from TOML/JSON mappings.

Every monitor is one entry of MONITOR_TYPES: its name (the `[monitors.<name>]` table, the
`MonitorsConfig(<name>=...)` keyword, the `monitors/<name>/` directory of its link record), its
config class, and the monitor class built from it. Adding a monitor is adding an entry.

In a mapping (a `[monitors]` TOML table), each monitor is a table of its fields (`[monitors.file]`
with no keys turns the file monitor on with its defaults), `true` (on, defaults) or `false` (off).

One config serves every component of a launch: `merge_monitors(shared, own, ...)` fills a
component's monitors from the shared `[monitors]` block, field by field. A field set in both
places must have the same value; otherwise ConfigurationError names the field and both places,
so a W&B project or a chunk size can never silently differ between trainer and orchestrator.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import ConfigurationError
from ..identity import COMPONENT_ENV

if TYPE_CHECKING:
    from .base import Monitor

__all__ = [
    "COMPONENT_ENV",
    "MONITORS_ENV",
    "MONITOR_TYPES",
    "FileMonitorConfig",
    "MonitorType",
    "MonitorsConfig",
    "OpenrunsMonitorConfig",
    "WandbMonitorConfig",
    "merge_monitors",
    "run_links",
]

# `openruns launch` hands each component its merged monitors config as JSON in this variable
# (and its name in COMPONENT_ENV: the default `producer` of its monitors).
MONITORS_ENV = "OPENRUNS_MONITORS"

_SUBSETS = ("all", "effective")
_KINDS = ("train", "eval")


@dataclass(frozen=True)
class FileMonitorConfig:
    """
    Local files under `<output_dir>/monitors/file/`.

    - `chunk_bytes`: an episode chunk is sealed and a new one started before it would grow past
      this many (compressed) bytes; an episode never spans chunks.
    - `subsets`: the cohorts whose episodes are written (`all`, `effective`); a producer that
      logs every arrival as `all` and the trained batch again as `effective` keeps one copy by
      listing only `all`.
    - `float_decimals`: decimals kept in the float columns of episodes and annotations written
      to disk (per-token streams: logprobs, advantages, entropies), as prime-rl's file monitor
      does; scalars (rewards, metrics) are never rounded. None keeps every digit.
    """

    chunk_bytes: int = 1 << 30
    subsets: tuple[str, ...] = _SUBSETS
    float_decimals: int | None = 4

    def __post_init__(self) -> None:
        if self.chunk_bytes <= 0:
            raise ConfigurationError(f"file.chunk_bytes must be positive, got {self.chunk_bytes}")
        _check_choices("file.subsets", self.subsets, _SUBSETS)
        if self.float_decimals is not None and not 0 <= self.float_decimals <= 17:
            raise ConfigurationError(
                f"file.float_decimals must be from 0 to 17 or null, got {self.float_decimals}"
            )


@dataclass(frozen=True)
class WandbMonitorConfig:
    """
    Metrics to a W&B run (install `openruns[wandb]`). Every process of a launch logs to one W&B
    run: its id is `$WANDB_RUN_ID`, else the openruns run id, else a new one, exported for
    children.

    - `mode`: online | offline; default `$WANDB_MODE`, else online.
    - `dir`: where W&B writes; default `<output_dir>/monitors/wandb/<producer>`.
    - `primary`: online only: the producer that creates and finishes the shared W&B run; every
      other producer joins it in W&B's shared mode. Unset: each process runs W&B normally.
    """

    project: str = "openruns"
    entity: str | None = None
    name: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    mode: str | None = None
    dir: str | None = None
    primary: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None:
            _check_choices("wandb.mode", (self.mode,), ("online", "offline"))


@dataclass(frozen=True)
class OpenrunsMonitorConfig:
    """
    Metrics and episodes to an openruns run. Under `openruns run` / `openruns launch` (or any
    process whose parent exported a run) it attaches to that run; otherwise it creates one with
    `name`, `kind`, `model`, `mode`, `dir` and finishes it in finalize().

    - `cohorts`: which `kind/subset` episodes are forwarded (default the trained batch,
      `train/effective`); metrics are always forwarded.
    """

    name: str | None = None
    kind: str = "train"
    model: str | None = None
    mode: str | None = None
    dir: str | None = None
    cohorts: tuple[str, ...] = ("train/effective",)

    def __post_init__(self) -> None:
        _check_choices("openruns.kind", (self.kind,), _KINDS)
        allowed = tuple(f"{k}/{s}" for k in _KINDS for s in _SUBSETS)
        _check_choices("openruns.cohorts", self.cohorts, allowed)


@dataclass(frozen=True)
class MonitorType:
    """A monitor: its config class, and where its class lives (imported when one is built, so
    a monitor that is off costs no import, e.g. of wandb)."""

    config: type
    module: str
    cls: str

    def build(self, config: Any, *, producer: str, output_dir: Path) -> Monitor:
        monitor_cls: Callable[..., Monitor] = getattr(
            importlib.import_module(self.module, __package__), self.cls
        )
        return monitor_cls(config, producer=producer, output_dir=output_dir)


# The one registration of each monitor, in the order they are built.
MONITOR_TYPES: dict[str, MonitorType] = {
    "file": MonitorType(FileMonitorConfig, ".file.monitor", "FileMonitor"),
    "wandb": MonitorType(WandbMonitorConfig, ".wandb_monitor", "WandbMonitor"),
    "openruns": MonitorType(OpenrunsMonitorConfig, ".openruns_monitor", "OpenrunsMonitor"),
}


class MonitorsConfig:
    """
    Which monitors a process runs: `MonitorsConfig(file=FileMonitorConfig(), wandb=None)`, one
    keyword per entry of MONITOR_TYPES (a monitor not given, or None, is off); read back as
    attributes (`config.file`). Immutable; equal when the same monitors are on alike.
    """

    __slots__ = ("_on",)

    def __init__(self, **monitors: Any):
        unknown = sorted(set(monitors) - set(MONITOR_TYPES))
        if unknown:
            raise ConfigurationError(f"unknown monitors {unknown}; known: {sorted(MONITOR_TYPES)}")
        on = {}
        for name, value in monitors.items():
            expected = MONITOR_TYPES[name].config
            if value is not None and not isinstance(value, expected):
                raise ConfigurationError(
                    f"{name} must be a {expected.__name__} or None, got {type(value).__name__}"
                )
            if value is not None:
                on[name] = value
        object.__setattr__(self, "_on", {n: on[n] for n in MONITOR_TYPES if n in on})

    def __getattr__(self, name: str) -> Any:
        if name in MONITOR_TYPES:
            return self._on.get(name)
        raise AttributeError(f"MonitorsConfig has no monitor {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("MonitorsConfig is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MonitorsConfig) and self._on == other._on

    def __hash__(self) -> int:
        return hash(tuple(self._on.items()))

    def __repr__(self) -> str:
        return f"MonitorsConfig({', '.join(f'{n}={v!r}' for n, v in self._on.items())})"

    def items(self) -> Iterator[tuple[str, Any]]:
        """(name, config) of every monitor that is on, in MONITOR_TYPES order."""
        return iter(self._on.items())

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "[monitors]") -> MonitorsConfig:
        """Build from a `[monitors]` table; errors name `where` and the offending key."""
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"{where} must be a table, got {type(data).__name__}")
        unknown = sorted(set(data) - set(MONITOR_TYPES))
        if unknown:
            raise ConfigurationError(
                f"{where}: unknown monitors {unknown}; known: {sorted(MONITOR_TYPES)}"
            )
        built = {
            name: _build(MONITOR_TYPES[name].config, value, f"{where}.{name}")
            for name, value in data.items()
        }
        return cls(**built)

    def to_mapping(self) -> dict[str, Any]:
        """The mapping from_mapping() reads back (off monitors as `false`)."""
        return {
            name: _plain(dataclasses.asdict(self._on[name])) if name in self._on else False
            for name in MONITOR_TYPES
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> MonitorsConfig | None:
        """The config `openruns launch` passed this component, or None outside a launch."""
        env = os.environ if environ is None else environ
        raw = env.get(MONITORS_ENV)
        if not raw:
            return None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ConfigurationError(f"${MONITORS_ENV} is not JSON: {exc}") from exc
        return cls.from_mapping(data, where=f"${MONITORS_ENV}")


def run_links(
    output_dir: str | os.PathLike[str], config: MonitorsConfig | None = None
) -> dict[str, Any]:
    """
    Where each monitor's run lives, from the link records its monitors wrote under
    `output_dir`: `{"openruns": {"id", "url", "kind"}, "wandb": {"id", "url"}, "file": {...}}`,
    keyed by the monitor's config field; only the monitors `config` turns on (default: any).
    """
    from .base import read_links

    names = [n for n, _ in config.items()] if config is not None else list(MONITOR_TYPES)
    return read_links(output_dir, names)


def merge_monitors(
    shared: Mapping[str, Any] | None,
    own: Mapping[str, Any] | None,
    *,
    shared_where: str,
    own_where: str,
) -> MonitorsConfig:
    """
    A component's monitors: its own table filled from the shared one, field by field. The same
    field (or on/off switch) set differently in both raises ConfigurationError listing every
    such field with both places and values.
    """
    shared = _as_table(shared, shared_where)
    own = _as_table(own, own_where)
    conflicts: list[str] = []
    merged: dict[str, Any] = {}
    for name in [*shared, *(k for k in own if k not in shared)]:
        if name not in own:
            merged[name] = shared[name]
        elif name not in shared:
            merged[name] = own[name]
        else:
            merged[name] = _merge_monitor(
                name, shared[name], own[name], shared_where, own_where, conflicts
            )
    if conflicts:
        raise ConfigurationError(
            "monitors are configured differently for this component than for the launch; set "
            "each value in one place:\n  " + "\n  ".join(conflicts)
        )
    # Validate each side alone first, so a bad key is reported where it was written.
    MonitorsConfig.from_mapping(shared, shared_where)
    MonitorsConfig.from_mapping(own, own_where)
    return MonitorsConfig.from_mapping(merged, f"{own_where} (merged with {shared_where})")


def _merge_monitor(
    name: str,
    shared: Any,
    own: Any,
    shared_where: str,
    own_where: str,
    conflicts: list[str],
) -> Any:
    if isinstance(shared, Mapping) and isinstance(own, Mapping):
        out = dict(shared)
        for key, value in own.items():
            if key in shared and shared[key] != value:
                conflicts.append(
                    f"{name}.{key}: {shared_where}.{name} sets {shared[key]!r}, "
                    f"{own_where}.{name} sets {value!r}"
                )
            out[key] = value
        return out
    # On/off switches: a table means on, so `true` agrees with a table and `false` does not.
    if _enabled(shared) != _enabled(own):
        conflicts.append(
            f"{name}: {shared_where}.{name} is {_describe(shared)}, "
            f"{own_where}.{name} is {_describe(own)}"
        )
    return own if isinstance(own, Mapping) else shared


def _enabled(value: Any) -> bool:
    return value is not False and value is not None


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "on (a table)"
    return "on" if _enabled(value) else "off"


def _as_table(value: Mapping[str, Any] | None, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a table, got {type(value).__name__}")
    return value


def _build(cls: type, value: Any, where: str) -> Any:
    if value is False or value is None:
        return None
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a table, true or false, got {value!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigurationError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    kwargs = {key: _coerce(known[key], item, f"{where}.{key}") for key, item in value.items()}
    try:
        return cls(**kwargs)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from exc


def _coerce(field: dataclasses.Field[Any], value: Any, where: str) -> Any:
    kind = str(field.type)
    if kind.startswith("tuple"):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigurationError(f"{where} must be a list of strings, got {value!r}")
        if not all(isinstance(v, str) for v in value):
            raise ConfigurationError(f"{where} must be a list of strings, got {value!r}")
        return tuple(value)
    if value is None and "None" in kind:
        return None
    if kind.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{where} must be an integer, got {value!r}")
        return value
    if kind.startswith("str"):
        if not isinstance(value, str):
            raise ConfigurationError(f"{where} must be a string, got {value!r}")
        return value
    raise AssertionError(f"unhandled field type {kind} for {where}")


def _check_choices(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ConfigurationError(f"{name}: {bad} not among {list(allowed)}")


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
