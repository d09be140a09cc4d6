"""
Settings, resolved once at init(): argument, then `OPENRUNS_*` environment, then the prime-runs
variables (`PRIME_API_KEY`, `PRIME_API_BASE_URL` / `PRIME_BASE_URL`, `PRIME_TEAM_ID`,
`PRIME_RUNS_MODE`), then config file, then default.

The config file is TOML: `$OPENRUNS_CONFIG_FILE`, else `$XDG_CONFIG_HOME/openruns/config.toml`
(`~/.config/openruns/config.toml`). Its keys are the field names below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from .config_layers import (
    FALSE_WORDS,
    TRUE_WORDS,
    first_layer,
    openruns_path,
    parse_bool,
    read_config_file,
    refuse_unknown_keys,
)
from .errors import ConfigurationError

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_SERVER_URL",
    "MODE_ENV",
    "TRACES_OPT_OUT_ENV",
    "Mode",
    "OnError",
    "Settings",
    "config_file_path",
    "traces_opt_out",
]

# prime-runs' names for the variables its code reads: the run mode, and the opt-out of Prime
# Traces (which openruns accepts and validates; episodes always go to the openruns server).
MODE_ENV = "PRIME_RUNS_MODE"
TRACES_OPT_OUT_ENV = "PRIME_TRACES_OPT_OUT"

# Fallbacks after OPENRUNS_<NAME>, so code and jobs set up for prime-runs keep working.
_PRIME_ENV = {
    "api_key": ("PRIME_API_KEY",),
    "base_url": ("PRIME_API_BASE_URL", "PRIME_BASE_URL"),
    "team_id": ("PRIME_TEAM_ID",),
    "mode": (MODE_ENV,),
}

Mode = Literal["online", "offline", "disabled"]
OnError = Literal["warn", "raise"]

_MODES = ("online", "offline", "disabled")
# The waits `connect_timeout` used to set alone (issue 23): each defaults to its value.
_CONNECT_DEFAULTED = ("init_timeout", "silent_server_timeout", "metadata_timeout")
_NONZERO = (
    "max_queued_records",
    "upload_buffer_bytes",
    "request_timeout",
    "connect_timeout",
    *_CONNECT_DEFAULTED,
)
# Not "openruns": a directory of that name in the working directory would shadow the package
# for `import openruns` in any interpreter that does not have it installed.
DEFAULT_DIR = "openruns-runs"
# Where `openruns server` listens by default (server/config.py: 127.0.0.1, DEFAULT_PORT): the
# server `openruns sync` and `openruns runs` talk to when none is set (issue 24).
DEFAULT_SERVER_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Settings:
    """
    Every setting openruns reads. Each field has the environment variable `OPENRUNS_<NAME>`;
    api_key, base_url, team_id and mode also read their prime-runs variable after it.

    - `mode`: online | offline | disabled. Default: online when `base_url` is set, else offline.
    - `base_url`: the openruns server, e.g. http://127.0.0.1:8765.
    - `api_key`: a team API key or a per-run token.
    - `team_id`: the team a new run belongs to (servers with auth know it from the key).
    - `dir`: where offline runs and upload spools are written. Default `./openruns-runs`.
    - `on_error`: warn (log upload failures, never raise) | raise (re-raise the first failure
      from the next flush() or at the end of finish()).
    - `finish_timeout`: seconds finish() may spend draining uploads. Default 300.
    - `max_queued_records`: records (references to the caller's objects, not yet encoded) a run
      holds per lane (metric rows; episodes and traces) before log_* calls start dropping and
      counting. Default 65536.
    - `spool_bytes`: disk an online run may use for batches the server has not taken yet
      (compressed); beyond it records are dropped and counted. Default 8 GiB.
    - `upload_buffer_bytes`: memory the upload pipeline may hold for encoded records (pieces
      waiting to be compressed, compressed batches waiting or in flight); beyond it the encoder
      waits, and new batches go to the spool when the server is down. Default 96 MiB.
    - `request_timeout`: seconds one HTTP request to the server may take. Default 60.
    - `connect_timeout`: seconds to open one connection to the server. Default 10. Also the
      default of the three waits below, which it set alone before they were split from it.
    - `init_timeout`: seconds init() tries to reach the server (its /health, then creating the
      run) before opening the run without it, its records waiting in the spool; a refused
      connection is not waited for. Default: `connect_timeout`.
    - `silent_server_timeout`: seconds finish() keeps trying a server that answers nothing
      before leaving what is left in the spool for `openruns sync`. Default: `connect_timeout`.
    - `metadata_timeout`: seconds one small call about the run may take, retries included: the
      summary at flush(), step metrics, fields filled in, an attached process's reported error,
      the status another process closed the run with. Default: `connect_timeout`.
    - `retry_timeout`: seconds a failed call is retried (backoff with jitter, Retry-After
      honoured) before it counts as failed: a read raises, `openruns sync` reports it. Uploads
      are never given up this way: a batch the server cannot take waits in the spool. Default 30.
    - `system_metrics_interval`: seconds between two samples of CPU, memory, disk, network and
      GPUs (system.py), logged as rows without a step under `system/`. 0: off. Default 10.
    - `capture_console`: keep what the run's owning process prints (stdout, stderr), and under
      `openruns run` / `openruns launch` what their commands print, with the run (console.py):
      the `logs` stream of the run directory, sent to the server like metrics and shown on the
      dashboard's Logs tab. Default true. A failed run's traceback is kept either way.
    - `origins`: not a setting: where each value came from (`OPENRUNS_MODE`, `the mode=
      argument`, ...), so that a message about a value names what set it (issue 24).
    """

    mode: Mode = "offline"
    base_url: str | None = None
    api_key: str | None = None
    team_id: str | None = None
    dir: str = DEFAULT_DIR
    on_error: OnError = "warn"
    finish_timeout: float = 300.0
    max_queued_records: int = 65536
    spool_bytes: int = 8 * 1024**3
    upload_buffer_bytes: int = 96 * 1024**2
    request_timeout: float = 60.0
    connect_timeout: float = 10.0
    init_timeout: float = 10.0
    silent_server_timeout: float = 10.0
    metadata_timeout: float = 10.0
    retry_timeout: float = 30.0
    system_metrics_interval: float = 10.0
    capture_console: bool = True
    origins: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @classmethod
    def resolve(
        cls,
        arguments: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        config_file: Path | None = None,
    ) -> Settings:
        """Resolve from `arguments` (None means not given), environment, config file, defaults."""
        env = os.environ if environ is None else environ
        path = config_file or config_file_path(env)
        file_values = read_config_file(path, ConfigurationError)
        names = [f.name for f in fields(cls) if f.name != "origins"]
        refuse_unknown_keys(file_values, names, path, ConfigurationError)
        values: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for name in names:
            found = first_layer(
                name,
                arguments.get(name),
                f"the {name}= argument",
                env,
                (f"OPENRUNS_{name.upper()}", *_PRIME_ENV.get(name, ())),
                file_values,
                path,
            )
            if found is not None:
                values[name], origins[name] = found
        for name in _CONNECT_DEFAULTED:
            if name not in values and "connect_timeout" in values:
                values[name] = values["connect_timeout"]
                origins[name] = origins["connect_timeout"]
        if "mode" not in values:
            values["mode"] = "online" if values.get("base_url") else "offline"
        values = _validated(values, origins)
        return cls(**values, origins=MappingProxyType(origins))

    def origin(self, name: str) -> str:
        """What set `name`, for messages: `OPENRUNS_BASE_URL`, `the base_url= argument`, ..."""
        return self.origins.get(name) or f"the default {name}"


def config_file_path(environ: Mapping[str, str] | None = None) -> Path:
    return openruns_path(environ, "OPENRUNS_CONFIG_FILE", "config", "config.toml")


# API roots a base URL may end in, stripped to the server's own URL: prime-runs' rule (its
# `/api/v1`, and the `/api/internal` root hosted runs get, each with or without prime-rl's
# `/rft`: `$PRIME_API_BASE` minus `/rft` is `.../api/internal`; issue 20).
_API_ROOTS = ("/api/v1/rft", "/api/v1", "/api/internal/rft", "/api/internal")


def _server_url(value: str) -> str:
    """The server's origin (and path prefix, if any), without a trailing `/` or an API root."""
    url = urlsplit(value.strip())
    if url.scheme not in ("http", "https") or not url.hostname:
        hint = "" if "://" in value else f" (did you mean http://{value.strip()}?)"
        raise _Invalid(
            "base_url",
            f"base_url must be an http:// or https:// URL with a host, got {value!r}{hint}",
        )
    try:
        url.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise _Invalid("base_url", f"base_url has an invalid port: {value!r}") from exc
    url_text = value.strip().rstrip("/")
    for root in _API_ROOTS:
        if url_text.endswith(root):
            return url_text.removesuffix(root)
    return url_text


def _validated(values: dict[str, Any], origins: Mapping[str, str]) -> dict[str, Any]:
    try:
        return _checked(values)
    except _Invalid as exc:
        where = origins.get(exc.name)
        raise ConfigurationError(f"{exc} (set by {where})" if where else str(exc)) from None


class _Invalid(ConfigurationError):
    """A value that is wrong; `_validated` names what set it."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    mode = str(values["mode"]).strip().lower()
    if mode not in _MODES:
        raise _Invalid("mode", f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    values["mode"] = mode
    if mode == "online" and not values.get("base_url"):
        raise ConfigurationError(
            "online mode needs a server: start one with `openruns server` and set "
            "OPENRUNS_BASE_URL (or pass base_url=), or pass mode='offline' for a run written "
            f"to ./{DEFAULT_DIR} that `openruns sync` uploads later"
        )
    if "on_error" in values:
        on_error = str(values["on_error"]).strip().lower()
        if on_error not in ("warn", "raise"):
            raise _Invalid("on_error", f"on_error must be 'warn' or 'raise', got {on_error!r}")
        values["on_error"] = on_error
    if values.get("base_url"):
        values["base_url"] = _server_url(str(values["base_url"]))
    for name, kind in (
        ("finish_timeout", float),
        ("max_queued_records", int),
        ("spool_bytes", int),
        ("upload_buffer_bytes", int),
        ("request_timeout", float),
        ("connect_timeout", float),
        ("init_timeout", float),
        ("silent_server_timeout", float),
        ("metadata_timeout", float),
        ("retry_timeout", float),
    ):
        if name in values:
            try:
                values[name] = kind(values[name])
            except (TypeError, ValueError) as exc:
                raise _Invalid(name, f"{name} must be a number, got {values[name]!r}") from exc
            if values[name] < 0 or (name in _NONZERO and values[name] == 0):
                raise _Invalid(name, f"{name} must be positive, got {values[name]!r}")
    if "system_metrics_interval" in values:
        try:
            interval = float(values["system_metrics_interval"])
        except (TypeError, ValueError) as exc:
            raise _Invalid(
                "system_metrics_interval",
                f"system_metrics_interval must be a number of seconds (0: off), "
                f"got {values['system_metrics_interval']!r}",
            ) from exc
        if not 0 <= interval < float("inf"):
            raise _Invalid(
                "system_metrics_interval",
                f"system_metrics_interval must be 0 (off) or a positive number of seconds, "
                f"got {values['system_metrics_interval']!r}",
            )
        values["system_metrics_interval"] = interval
    if "capture_console" in values:
        values["capture_console"] = _flag("capture_console", values["capture_console"])
    if "dir" in values:
        values["dir"] = os.fspath(values["dir"])
    return values


def _flag(name: str, value: Any) -> bool:
    try:
        return parse_bool(value)
    except ValueError:
        raise _Invalid(name, f"{name} must be true or false, got {value!r}") from None


def traces_opt_out(argument: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """
    prime-runs' opt-out of Prime Traces: the argument, else `PRIME_TRACES_OPT_OUT`
    (1/true/yes/on or 0/false/no/off; blank is unset), else False. A value that is neither
    raises ConfigurationError, as prime-runs does, before anything is created.
    """
    if argument is not None:
        if not isinstance(argument, bool):
            raise ConfigurationError(f"traces_opt_out must be True or False, got {argument!r}")
        return argument
    env = os.environ if environ is None else environ
    value = (env.get(TRACES_OPT_OUT_ENV) or "").strip().lower()
    if not value:
        return False
    if value in TRUE_WORDS or value in FALSE_WORDS:
        return parse_bool(value)
    raise ConfigurationError(
        f"{TRACES_OPT_OUT_ENV}={env[TRACES_OPT_OUT_ENV]!r} is not one of true or false"
    )
