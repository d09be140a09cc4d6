"""Value types of the public API: run status and kind, the training spec, the config source."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from .errors import ConfigurationError

__all__ = [
    "FILLABLE",
    "CONFIG_SOURCE_KEY",
    "MAX_CONFIG_SOURCE_BYTES",
    "MAX_ERROR_CHARS",
    "MAX_LOG_LINE_CHARS",
    "MAX_STEP",
    "MAX_STEPS_PAGE",
    "ConfigSource",
    "EnvironmentRef",
    "RunKind",
    "RunStatus",
    "TrainingSpec",
    "cut_text",
]

RunKind = Literal["eval", "train"]

# Steps are integers from 0 to this (a signed 64-bit column), everywhere: metrics, episodes,
# annotations; the server refuses others with a 400, the SDK at the call.
MAX_STEP = 2**63 - 1
# Rows of one answer of a run's per-step table (GET /runs/{id}/steps), a default and a limit.
MAX_STEPS_PAGE = 10_000

# The text limits the server holds runs to, written once for the SDK and the server (which
# imports them; issue 25: a cut of 65,546 characters against a limit of 65,536 lost a failed
# run's traceback and its finish). A run's error (finish, a component's fatal error):
MAX_ERROR_CHARS = 100_000
# One console line (a log record's `line`; a traceback is one line):
MAX_LOG_LINE_CHARS = 65_536


def cut_text(text: str, limit: int, keep: Literal["start", "end"] = "start") -> str:
    """
    `text` within `limit` characters: unchanged if it fits, else its start (or its end, for a
    traceback, whose last frames are nearest the error) with a marker saying how many
    characters were cut. The marker counts against `limit`.
    """
    if len(text) <= limit:
        return text
    if limit < 128:  # no room for a marker
        return text[:limit] if keep == "start" else text[-limit:]
    cut = len(text) - limit + 64  # room for the marker (at most 64 characters)
    marker = f"[openruns: {cut} characters cut]"
    if keep == "end":
        return f"{marker}\n{text[cut:]}"[-limit:]
    return f"{text[: len(text) - cut]}\n{marker}"[:limit]


# The run metadata a process attached to a run may fill in where the run's owner set none.
FILLABLE = (
    "name",
    "model",
    "environments",
    "framework",
    "description",
    "tags",
    "config",
    "training",
)

# A config is the file a job was launched with, shown on the run page; 256 KiB is far beyond a
# real launch config and keeps run metadata a small row.
MAX_CONFIG_SOURCE_BYTES = 256 * 1024
# Where a config file sits inside a prime-runs config mapping: `{"config_source": {"format",
# "text", "filename"}}`. openruns stores the file itself as the run's config, so such a mapping
# is read as that file (ConfigSource.coerce), on the SDK and on the server's Prime wire alike.
CONFIG_SOURCE_KEY = "config_source"

_FORMAT_BY_SUFFIX = {".toml": "toml", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}
_FORMATS = ("toml", "json", "yaml", "text")


class RunStatus(enum.StrEnum):
    """Where a run is in its life. Every status but RUNNING is terminal."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CRASHED = "crashed"

    def is_terminal(self) -> bool:
        return self is not RunStatus.RUNNING


@dataclass(frozen=True)
class TrainingSpec:
    """Shape of a training run, shown on its page. `max_steps=0` means unknown."""

    max_steps: int = 0
    batch_size: int | None = None
    rollouts_per_example: int | None = None
    seq_len: int | None = None
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_run_name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 0:
            raise ValueError(f"TrainingSpec.max_steps must be an int >= 0, got {self.max_steps!r}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class ConfigSource:
    """
    The config a run was launched with, kept byte-for-byte with its format.

    `ConfigSource.from_file("eval.toml")` reads the file (UTF-8, at most 256 KiB);
    `ConfigSource.from_mapping({...})` stores a mapping as JSON text.
    """

    text: str
    format: str = "toml"
    filename: str | None = None

    def __post_init__(self) -> None:
        if self.format not in _FORMATS:
            raise ConfigurationError(
                f"config format must be one of {', '.join(_FORMATS)}, got {self.format!r}"
            )
        size = len(self.text.encode("utf-8"))
        if size > MAX_CONFIG_SOURCE_BYTES:
            raise ConfigurationError(
                f"config is {size} bytes; at most {MAX_CONFIG_SOURCE_BYTES} bytes are stored"
            )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ConfigSource:
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"config: cannot read {str(p)!r}: {exc.strerror}") from exc
        if len(data) > MAX_CONFIG_SOURCE_BYTES:
            raise ConfigurationError(
                f"config: {str(p)!r} is {len(data)} bytes; "
                f"at most {MAX_CONFIG_SOURCE_BYTES} bytes are stored"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"config: {str(p)!r} is not UTF-8 text") from exc
        fmt = _FORMAT_BY_SUFFIX.get(p.suffix.lower(), "text")
        return cls(text=text, format=fmt, filename=p.name)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ConfigSource:
        try:
            text = orjson.dumps(
                values, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
            ).decode()
        except TypeError as exc:
            raise ConfigurationError(f"config mapping is not JSON-serialisable: {exc}") from exc
        return cls(text=text, format="json")

    @classmethod
    def coerce(cls, value: Any) -> ConfigSource | None:
        """Accept a path, a ConfigSource, a mapping or None (the `config=` argument of init)."""
        if value is None or isinstance(value, ConfigSource):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls.from_file(value)
        if isinstance(value, Mapping):
            source = value.get(CONFIG_SOURCE_KEY)
            if len(value) == 1 and isinstance(source, Mapping) and "text" in source:
                return cls(
                    text=source["text"],
                    format=source.get("format") or "toml",
                    filename=source.get("filename"),
                )
            return cls.from_mapping(value)
        raise ConfigurationError(
            f"config must be a path, a ConfigSource or a mapping, got {type(value).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "text": self.text}
        if self.filename is not None:
            out["filename"] = self.filename
        return out


@dataclass(frozen=True)
class EnvironmentRef:
    """
    An environment a run used, as prime-runs names it: `name` (resolved by the hub's
    get-or-create), `slug` (`owner/name`), or `id` (used as given), with an optional
    `version_id`. `EnvironmentRef.coerce("owner/x")` is a slug, `coerce("x")` a name.
    """

    name: str | None = None
    id: str | None = None
    version_id: str | None = None
    slug: str | None = None

    def __post_init__(self) -> None:
        if not (self.name or self.slug or self.id):
            raise ValueError("EnvironmentRef needs a name, slug or id")
        if self.slug is not None:
            owner, _, name = self.slug.partition("/")
            if not owner or not name:
                raise ValueError(f"EnvironmentRef slug must be owner/name, got {self.slug!r}")

    @classmethod
    def coerce(cls, value: Any) -> EnvironmentRef:
        """A str (`owner/name` is a slug, anything else a name), a mapping, or a ref."""
        if isinstance(value, EnvironmentRef):
            return value
        if isinstance(value, str):
            return cls(slug=value) if "/" in value else cls(name=value)
        if isinstance(value, Mapping):
            return cls(
                name=value.get("name"),
                id=value.get("id"),
                version_id=value.get("version_id"),
                slug=value.get("slug"),
            )
        raise TypeError(
            f"an environment must be a str, a mapping or an EnvironmentRef, "
            f"got {type(value).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}
