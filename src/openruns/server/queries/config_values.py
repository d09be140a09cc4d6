"""
A run's config as the values a filter reads. The run keeps its config file byte for byte
(spec.ConfigSource: JSON, TOML, YAML or plain text); a filter on `config.lr` reads the mapping
that file holds, parsed once when the config is written and stored beside it
(runs.config_values, migration 0017). A W&B config (`{key: {"value": v, "desc": ...}}`) is
read as its values. Text that does not parse, or is not a mapping, has no values: every
`config.` comparison is false for that run.
"""

from __future__ import annotations

import tomllib
from typing import Any

import orjson

__all__ = ["config_values"]


def config_values(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The mapping a stored config (ConfigSource.to_dict()) holds, or None."""
    if not config or not isinstance(config.get("text"), str):
        return None
    text, form = config["text"], config.get("format")
    try:
        if form == "json":
            values = orjson.loads(text)
        elif form == "toml":
            values = tomllib.loads(text)
        elif form == "yaml":
            values = _yaml(text)
        else:
            return None
    except (ValueError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(values, dict):
        return None
    return _unwrap_wandb(values)


def _yaml(text: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML, when installed (the wandb extra brings it)
    except ImportError:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


def _unwrap_wandb(values: dict[str, Any]) -> dict[str, Any]:
    """W&B's config.yaml wraps each value: {lr: {desc: null, value: 0.1}, _wandb: {...}}."""
    wrapped = [v for k, v in values.items() if k != "_wandb"]
    if wrapped and all(isinstance(v, dict) and "value" in v for v in wrapped):
        return {k: v["value"] for k, v in values.items() if k != "_wandb"}
    return values
