"""
How a setting is found, the same for the SDK's `Settings` and the server's `ServerSettings`:
an argument, then environment variables, then a TOML config file, then the default. Written
once here: where the config file is (an override variable, else under `$XDG_CONFIG_HOME`),
reading it, refusing a key no setting has, the first layer that holds a value, and the words
for true and false. Standard library only: `openruns --help` and `import openruns` stay cheap.

    path = openruns_path(env, "OPENRUNS_CONFIG_FILE", "config", "config.toml")
    from_file = read_config_file(path, ConfigurationError)
    refuse_unknown_keys(from_file, known_names, path, ConfigurationError)
    found = first_layer(
        "dir", argument, "the dir= argument", env, ("OPENRUNS_DIR",), from_file, path
    )
    if found is not None:
        value, source = found  # source names the layer, for errors: "OPENRUNS_DIR"

Each caller keeps its own error type (`ConfigurationError` in the SDK, `ServerConfigError` in
the server) and its own value checks; what is shared is only the layering.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "FALSE_WORDS",
    "TRUE_WORDS",
    "first_layer",
    "openruns_path",
    "parse_bool",
    "read_config_file",
    "refuse_unknown_keys",
]

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

# XDG base directories: the variable, and its default under the home directory.
_XDG = {"config": ("XDG_CONFIG_HOME", (".config",)), "data": ("XDG_DATA_HOME", (".local", "share"))}


def openruns_path(
    environ: Mapping[str, str] | None,
    override: str,
    kind: Literal["config", "data"],
    *parts: str,
) -> Path:
    """`$override` when set, else `<XDG base of kind>/openruns/<parts>` (e.g. kind "config":
    `$XDG_CONFIG_HOME`, by default `~/.config`)."""
    env = os.environ if environ is None else environ
    if env.get(override):
        return Path(env[override])
    variable, default = _XDG[kind]
    base = env.get(variable) or str(Path.home().joinpath(*default))
    return Path(base, "openruns", *parts)


def read_config_file(path: Path, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The TOML file at `path`; {} when there is none. A file that cannot be read or parsed
    raises `error("config file PATH: why")`."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise error(f"config file {path}: {exc}") from exc


def refuse_unknown_keys(
    from_file: Mapping[str, Any],
    known: Collection[str],
    path: Path,
    error: Callable[[str], Exception],
) -> None:
    """A key no setting has is a typo, never ignored: `error` names it and the known keys."""
    unknown = set(from_file) - set(known)
    if unknown:
        raise error(
            f"config file {path}: unknown keys {sorted(unknown)}; known keys are {sorted(known)}"
        )


def first_layer(
    name: str,
    argument: Any,
    argument_source: str,
    environ: Mapping[str, str],
    variables: Sequence[str],
    from_file: Mapping[str, Any],
    path: Path,
) -> tuple[Any, str] | None:
    """The value of setting `name` from the first layer that holds one, and what set it: the
    argument (None: not given), then the first of `variables` set to a non-empty value, then
    the config file (`NAME in PATH`); None when no layer holds one (the default applies)."""
    if argument is not None:
        return argument, argument_source
    for variable in variables:
        if environ.get(variable):
            return environ[variable], variable
    if name in from_file:
        return from_file[name], f"{name} in {path}"
    return None


def parse_bool(value: Any) -> bool:
    """A bool as given, or one of the words (any case, spaces around ignored); anything else
    raises ValueError saying which words are meant."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ValueError("use true/false, 1/0, yes/no or on/off")
