"""
Server settings: one frozen value object, declared once. Standard library only, so
`openruns --help` stays cheap.

Each field is declared with `setting(...)`: its default, its help, and its name. The name is
the same everywhere: the flag `--NAME`, the variable `OPENRUNS_NAME` and the key `NAME` in
the server's config file (TOML; `--config`, else `$OPENRUNS_SERVER_CONFIG`, else
`$XDG_CONFIG_HOME/openruns/server.toml`). `ServerSettings.resolve` layers them like the SDK's
Settings: argument > OPENRUNS_* > config file > default; cli.py generates the flags from the
same declaration.

    settings = ServerSettings.resolve({"database_url": "postgresql://db/openruns"})
    settings = ServerSettings(data_dir=Path("/srv/openruns"), host="0.0.0.0", auth=True)

Storage: metadata in `database_url` (default SQLite at DATA_DIR/openruns.db, WAL mode; or
postgresql://...), blobs in `blobs` (default DATA_DIR/blobs; or s3://bucket/prefix).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config_layers import (
    first_layer,
    openruns_path,
    parse_bool,
    read_config_file,
    refuse_unknown_keys,
)
from .retention_policy import DEFAULT_KEEP_PER_STEP, RetentionRule, RuleError, parse_rules

__all__ = [
    "DEFAULT_PORT",
    "ServerConfigError",
    "ServerSettings",
    "config_file_path",
    "default_data_dir",
    "is_loopback",
    "setting_specs",
]

DEFAULT_PORT = 8765
MiB = 1024 * 1024
# The retention pass runs at most this often (a flag or variable asking for less is refused):
# a pass reads every ended run's retention state, so seconds apart would be all overhead.
MIN_RETENTION_INTERVAL = 60.0


class ServerConfigError(Exception):
    """The server cannot start with these settings; the message says how to fix it."""


def _default_parse_workers() -> int:
    """The cores but the writer's, at most 4 (parse_workers.py)."""
    return max(0, min(4, (os.cpu_count() or 1) - 1))


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    return openruns_path(environ, "OPENRUNS_DATA_DIR", "data")


def config_file_path(environ: Mapping[str, str] | None = None) -> Path:
    return openruns_path(environ, "OPENRUNS_SERVER_CONFIG", "config", "server.toml")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    name: str | None = None,
    alias: str | None = None,
    unit: int = 1,
    unit_name: str = "",
    metavar: str | None = None,
    default_text: str | None = None,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """
    A ServerSettings field. `name` (default: the field's) names the flag, the variable and the
    config key; values given there are in units of `unit` (e.g. MiB for a byte count).
    `default_text` describes a default that is computed rather than fixed.
    """
    meta = {
        "help": help,
        "name": name,
        "alias": alias,
        "unit": unit,
        "unit_name": unit_name,
        "metavar": metavar,
        "default_text": default_text,
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """
    Everything the server reads. Auth: off on a loopback address unless `auth=True`; any other
    address needs `auth=True` (API keys) or `insecure=True` (explicitly no auth).
    """

    data_dir: Path = setting(
        default_factory=default_data_dir,
        metavar="DIR",
        help="where the default stores live (openruns.db and blobs/)",
        default_text="$XDG_DATA_HOME/openruns, i.e. ~/.local/share/openruns",
    )
    database_url: str | None = setting(
        None,
        alias="--db",
        metavar="URL",
        help="the metadata database: sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB",
        default_text="SQLite at DATA_DIR/openruns.db",
    )
    blobs: str | None = setting(
        None,
        metavar="DIR|s3://BUCKET/PREFIX",
        help="where episode segments are kept: a directory, or an S3-compatible bucket (region "
        "and credentials from the standard AWS variables)",
        default_text="DATA_DIR/blobs",
    )
    s3_endpoint_url: str | None = setting(
        None,
        metavar="URL",
        help="the S3-compatible endpoint (MinIO, R2, GCS, ...)",
        default_text="$AWS_ENDPOINT_URL, else AWS S3",
    )
    host: str = setting("127.0.0.1", metavar="HOST", help="address to listen on")
    port: int = setting(DEFAULT_PORT, alias="-p", metavar="PORT", help="port; 0 picks a free one")
    auth: bool = setting(
        False,
        help="require an API key on every request (create keys with `openruns keys create`); "
        "off on a loopback address without it",
    )
    insecure: bool = setting(
        False, help="accept unauthenticated requests on a non-loopback address"
    )
    public_url: str | None = setting(
        None,
        metavar="URL",
        help="the URL users reach the server at, for absolute run links "
        "(e.g. https://runs.example.com)",
        default_text="relative links",
    )
    heartbeat_timeout: float = setting(
        45.0,
        metavar="S",
        unit_name="s",
        help="a running run silent this long becomes crashed (owners heartbeat three times in "
        "it, at most 15 s apart; with the sweep every quarter, a SIGKILLed producer shows within "
        "a minute); silence counts from the server's start at the earliest",
    )
    finish_grace: float = setting(
        60.0,
        metavar="S",
        unit_name="s",
        help="uploads to a finished run are still accepted this long, so the SDK's final drain "
        "lands",
    )
    alert_interval: float = setting(
        10.0,
        metavar="S",
        unit_name="s",
        help="how often the alert evaluator looks at what changed, and due webhook deliveries "
        "are sent",
    )
    alert_retry_delay: float = setting(
        5.0,
        metavar="S",
        unit_name="s",
        help="wait before a failed webhook delivery's second attempt; doubled for each further "
        "one, with jitter",
    )
    alert_attempts: int = setting(
        6, metavar="N", help="attempts of a webhook delivery before it is marked failed"
    )
    rate_limit: float = setting(
        50.0, metavar="N", help="requests per second per API key or run token; 0: unlimited"
    )
    rate_burst: int = setting(200, metavar="N", help="burst size of the rate limit")
    max_body_bytes: int = setting(
        512 * MiB,
        name="max_body_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="largest upload body, as sent",
    )
    max_decompressed_bytes: int = setting(
        1024 * MiB,
        name="max_decompressed_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="largest upload body once decompressed",
    )
    max_ingest_requests: int = setting(
        32,
        metavar="N",
        help="uploads processed at once; more wait for a slot (by run, in turns) up to "
        "--ingest-queue-wait, then get 503 + Retry-After",
    )
    ingest_queue_wait: float = setting(
        5.0,
        metavar="S",
        unit_name="s",
        help="how long an upload waits for a slot when every one is taken (keep it under the "
        "SDK's 10 s connect timeout: server.md, Admission); 0: no wait",
    )
    max_ingest_bytes: int = setting(
        1024 * MiB,
        name="max_ingest_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="upload bytes in flight at once; more get 503 + Retry-After",
    )
    max_ingest_per_caller: int = setting(
        8,
        metavar="N",
        help="uploads of one caller (API key, run token, or client address with auth off) to "
        "one run, in flight or waiting, at once; more get 429 + Retry-After, so one client "
        "cannot take every upload slot",
    )
    max_upload_lines: int = setting(
        1_000_000,
        metavar="N",
        help="lines of one upload once decompressed (blank lines count); more get 413",
    )
    metric_chunk_points: int = setting(
        50_000,
        metavar="N",
        help="metric points of an upload this process parses and writes at a time (within "
        "its one transaction): the upload's memory follows this, not its size (an upload a "
        "parse worker takes is written whole)",
    )
    parse_workers: int = setting(
        default_factory=_default_parse_workers,
        metavar="N",
        help="processes that decode and parse metrics uploads (bodies of 64 KiB or more as "
        "sent, up to 32 MiB decoded) while the server writes the one before; 0: the server "
        "parses them itself",
        default_text="the cores less one, at most 4",
    )
    max_record_bytes: int = setting(
        64 * MiB,
        name="max_record_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="longest line (one record) of an upload once decompressed; longer get 413",
    )
    body_grace: float = setting(
        10.0,
        metavar="S",
        unit_name="s",
        help="a request body may take this long before --body-min-kib-per-s applies",
    )
    body_min_rate: int = setting(
        8 * 1024,
        name="body_min_kib_per_s",
        unit=1024,
        unit_name="KiB/s",
        metavar="KIB",
        help="after --body-grace a request body must have come at this average rate or faster, "
        "else 408 (the connection closes); 0: no minimum",
    )
    body_idle_timeout: float = setting(
        20.0,
        metavar="S",
        unit_name="s",
        help="a request body that sends nothing this long gets 408; an upload silent a quarter "
        "of it gives its slot up when the server is full; 0: no limit",
    )
    max_json_bytes: int = setting(
        8 * MiB,
        name="max_json_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="largest body of a JSON call (create, patch, finish)",
    )
    max_log_bytes: int = setting(
        10 * MiB,
        name="max_log_mib",
        unit=MiB,
        unit_name="MiB",
        metavar="MIB",
        help="console output kept per run: beyond it the middle is dropped (and counted), the "
        "first and last halves kept; 0: unbounded",
    )
    query_timeout: float = setting(
        30.0, metavar="S", unit_name="s", help="a read query running longer is stopped (503)"
    )
    db_pool_size: int = setting(
        8,
        metavar="N",
        help="PostgreSQL connections of this process for writes, and as many for reads "
        "(SQLite: always 1 writer, 4 readers)",
    )
    db_pool_timeout: float = setting(
        10.0,
        metavar="S",
        unit_name="s",
        help="a request waiting this long for a database connection gets 503 + Retry-After",
    )

    session_lifetime: float = setting(
        12 * 3600.0,
        name="session_hours",
        unit=3600,
        unit_name="h",
        metavar="H",
        help="a dashboard sign-in lasts this long (auth on); then the browser signs in again",
    )
    trusted_proxies: frozenset[str] | None = setting(
        None,
        metavar="ADDR,...",
        help="addresses (or CIDR ranges, or *) of reverse proxies in front of the server: their "
        "X-Forwarded-Proto and X-Forwarded-For are believed (HTTPS session cookies are then "
        "Secure, sign-in limits count per client)",
        default_text="none: those headers are ignored",
    )

    allowed_hosts: frozenset[str] | None = setting(
        None,
        metavar="HOST,...",
        help="names the server answers to in the Host header, besides loopback names, the "
        "address it listens on and --public-url's host (DNS-rebinding defence; '.example.com' "
        "takes its subdomains, '*' any name); others get 400",
        default_text="with auth off: those only (any IP address too on a non-loopback bind); "
        "with auth on: any host",
    )
    access_log: float = setting(
        1.0,
        metavar="FRACTION",
        help="requests logged, one line each (method, path without the query string, status, "
        "milliseconds, bytes) on the openruns.server.access logger: 1 every request, 0.1 a "
        "tenth of the successful ones (errors are always logged), 0 none",
    )

    retention_days: float | None = setting(
        None,
        metavar="DAYS",
        help="retention for every run: a run ended more than DAYS ago keeps its metrics, "
        "summary, config and logs, and --retention-keep-per-step episodes per (stream, kind, "
        "step); the rest are dropped. [[retention]] entries of the config file set it per team "
        "or project (docs/server.md, Retention)",
        default_text="none: episodes are kept for good",
    )
    retention_keep_per_step: int = setting(
        DEFAULT_KEEP_PER_STEP,
        metavar="K",
        help="episodes kept per (stream, kind, step) by retention: the best and worst reward, "
        "then the lowest hashes of their ids (also the default of [[retention]] entries)",
    )
    retention_interval: float = setting(
        3600.0,
        metavar="S",
        unit_name="s",
        help=f"how often the retention pass runs (at least {MIN_RETENTION_INTERVAL:.0f} s)",
    )
    # The config file's [[retention]] entries (retention_policy.py): a file key only, no flag
    # or variable; `retention_rules()` adds the one --retention-days makes.
    retention: tuple[RetentionRule, ...] = dataclasses.field(
        default=(), metadata={"file_only": True}
    )

    prime_training_teams: frozenset[str] | None = setting(
        None,
        metavar="TEAM,...",
        help="teams that may create external training runs through the Prime wire "
        "(prime-runs kind='train'); others get 403 with the reason",
        default_text="every team",
    )

    @classmethod
    def resolve(
        cls,
        arguments: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        config_file: Path | None = None,
    ) -> ServerSettings:
        """
        Settings from `arguments` (by setting name, in its unit; None: not given), then
        OPENRUNS_<NAME>, then the config file, then the defaults. ServerConfigError names a
        bad value and where it came from.
        """
        arguments = arguments or {}
        env = os.environ if environ is None else environ
        path = config_file or config_file_path(env)
        from_file = read_config_file(path, ServerConfigError)
        specs = setting_specs()
        refuse_unknown_keys(
            from_file, [s.name for s in specs] + ["retention"], path, ServerConfigError
        )
        values: dict[str, Any] = {}
        for spec in specs:
            found = first_layer(
                spec.name,
                arguments.get(spec.name),
                f"--{spec.flag_name}",
                env,
                (f"OPENRUNS_{spec.name.upper()}",),
                from_file,
                path,
            )
            if found is not None:
                values[spec.field] = spec.parse(*found)
        values.setdefault("data_dir", default_data_dir(env))
        _check_retention(values, from_file.get("retention"), path)
        if values.get("auth") and values.get("insecure"):
            raise ServerConfigError("--auth and --insecure contradict each other: pick one")
        return cls(**values)

    def retention_rules(self) -> tuple[RetentionRule, ...]:
        """The retention policy: the config file's entries, and --retention-days as an entry
        for every run (it replaces a file entry naming neither team nor project)."""
        if self.retention_days is None:
            return self.retention
        rules = [r for r in self.retention if r.team is not None or r.project is not None]
        return (*rules, RetentionRule(self.retention_days, self.retention_keep_per_step))

    def sqlalchemy_url(self) -> str:
        """The database URL as SQLAlchemy takes it (postgresql:// speaks psycopg 3)."""
        url = self.database_url or f"sqlite:///{self.data_dir / 'openruns.db'}"
        scheme, sep, rest = url.partition("://")
        if not sep:
            raise ServerConfigError(
                f"--database-url {url!r} is not a URL: use sqlite:///PATH or "
                "postgresql://USER:PASSWORD@HOST:PORT/DB"
            )
        if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
            return f"postgresql+psycopg://{rest}"
        if scheme == "sqlite":
            return url
        raise ServerConfigError(
            f"--database-url: unsupported database {scheme!r}; use sqlite:///PATH or "
            "postgresql://USER:PASSWORD@HOST:PORT/DB"
        )

    def blob_location(self) -> str:
        """`s3://bucket/prefix` or a local directory path."""
        if self.blobs:
            return self.blobs.removeprefix("file://")
        return str(self.data_dir / "blobs")

    def uses_data_dir(self) -> bool:
        """Whether a default store lives in data_dir (then it must be a writable directory)."""
        return self.database_url is None or self.blobs is None

    def auth_enabled(self) -> bool:
        """Whether requests need a key; raises ServerConfigError for an unsafe bind."""
        if self.auth:
            return True
        if is_loopback(self.host) or self.insecure:
            return False
        raise ServerConfigError(
            f"refusing to listen on {self.host} without authentication: pass --auth to require "
            "API keys (create one with `openruns keys create --team TEAM`), or --insecure to "
            "accept unauthenticated requests from the network"
        )


def _check_retention(values: dict[str, Any], entries: Any, path: Path) -> None:
    """The retention settings `resolve` found, checked; the file's entries parsed into
    values["retention"]. ServerConfigError names the flag, or the entry and the key."""
    days = values.get("retention_days")
    if days is not None and not days > 0:
        raise ServerConfigError(f"--retention-days must be more than 0 days, got {days!r}")
    keep = values.get("retention_keep_per_step", DEFAULT_KEEP_PER_STEP)
    if keep < 1:
        raise ServerConfigError(f"--retention-keep-per-step must be at least 1, got {keep}")
    interval = values.get("retention_interval")
    if interval is not None and interval < MIN_RETENTION_INTERVAL:
        raise ServerConfigError(
            f"--retention-interval must be at least {MIN_RETENTION_INTERVAL:.0f} s (a pass "
            f"reads every ended run), got {interval:g} s"
        )
    try:
        values["retention"] = parse_rules(entries, f"retention in {path}", keep)
    except RuleError as exc:
        raise ServerConfigError(str(exc)) from exc


@dataclass(frozen=True)
class SettingSpec:
    """One ServerSettings field as the outside world sees it (cli.py builds flags from it)."""

    field: str
    name: str
    kind: type
    optional: bool
    help: str
    alias: str | None
    unit: int
    unit_name: str
    metavar: str | None
    default_text: str

    @property
    def flag_name(self) -> str:
        return self.name.replace("_", "-")

    def parse(self, raw: Any, source: str) -> Any:
        """The field's value from `raw` (a string from the environment, a TOML value or a
        parsed flag), in the setting's unit."""
        try:
            if self.kind is bool:
                return parse_bool(raw)
            if self.kind is Path:
                return Path(raw)
            if self.kind is str:
                return str(raw)
            if self.kind is frozenset:  # "a,b" (a flag, a variable) or a TOML list
                items = (
                    raw if isinstance(raw, list | tuple | set | frozenset) else str(raw).split(",")
                )
                return frozenset(str(item).strip() for item in items if str(item).strip())
            value = self.kind(raw) * self.unit
            if value < 0:
                raise ValueError("must not be negative")
            return value
        except (TypeError, ValueError) as exc:
            raise ServerConfigError(
                f"{source}: expected {_KIND_NAMES[self.kind]}, got {raw!r} ({exc})"
            ) from exc


_KIND_NAMES = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    frozenset: "a comma-separated list",
}


def setting_specs() -> list[SettingSpec]:
    hints = typing.get_type_hints(ServerSettings)
    defaults = ServerSettings.__dataclass_fields__
    specs = []
    for f in dataclasses.fields(ServerSettings):
        meta = f.metadata
        if meta.get("file_only"):  # no flag, no variable: resolve reads it from the file
            continue
        kind = hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        optional = bool(args)
        if optional:
            kind = args[0]
        kind = typing.get_origin(kind) or kind  # frozenset[str] -> frozenset
        default_text = meta["default_text"]
        if default_text is None and kind is bool:
            default_text = "on" if defaults[f.name].default else "off"
        elif default_text is None:
            value = defaults[f.name].default
            shown = value // meta["unit"] if meta["unit"] > 1 else value
            if isinstance(shown, float) and shown.is_integer():
                shown = int(shown)
            default_text = f"{shown} {meta['unit_name']}".strip()
        specs.append(
            SettingSpec(
                field=f.name,
                name=meta["name"] or f.name,
                kind=kind,
                optional=optional,
                help=meta["help"],
                alias=meta["alias"],
                unit=meta["unit"],
                unit_name=meta["unit_name"],
                metavar=meta["metavar"],
                default_text=default_text,
            )
        )
    return specs
