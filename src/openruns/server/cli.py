"""
`openruns server`: start the tracking server. `openruns server check`: compare the blob store
with the database (check.py). `openruns server usage`: what the stores hold (usage_cli.py).
`openruns server retention`: one retention pass by hand (retention/cli.py).

The flags are generated from ServerSettings' declaration (config.py), so a new setting is a
flag, a variable and a config key at once. A flag left out is None here, so that
ServerSettings.resolve falls back to OPENRUNS_*, the config file, then the default. `check`
and `usage` take the stores' settings the same way (and only those).

Cheap to import (the `openruns` command imports it to build its parser): FastAPI, SQLAlchemy
and uvicorn are imported in `run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ServerConfigError, ServerSettings, setting_specs

__all__ = ["add_arguments", "run"]

# The settings `openruns server check` and `usage` need: where the stores are.
_STORE_SETTINGS = ("data_dir", "database_url", "blobs", "s3_endpoint_url")
# `openruns server retention` also takes the policy's flags (the file's entries come along).
_RETENTION_SETTINGS = (*_STORE_SETTINGS, "retention_days", "retention_keep_per_step")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Start the openruns server: the API under /api/v1 (docs at /api/v1/docs) and the "
        "dashboard at /. By default everything is kept in one data directory: openruns.db "
        "(SQLite, WAL mode) and blobs/; at scale, --db postgresql://... and --blobs "
        "s3://BUCKET/PREFIX let several replicas share one deployment. Auth is off when "
        "listening on a loopback address; any other address needs --auth (API keys) or "
        "--insecure. Every flag is also the variable OPENRUNS_<NAME> and the key <name> of the "
        "config file; a flag wins over the variable, the variable over the file. `openruns "
        "server check` lists damaged or unreferenced blobs; `openruns server usage` what "
        "each team, project and run stores."
    )
    _add_settings(parser, [spec.name for spec in setting_specs()], default=None)
    sub = parser.add_subparsers(dest="server_action", metavar="{check,usage,retention}")
    check = sub.add_parser(
        "check",
        help="list damaged or unreferenced blobs; remove the unreferenced",
        description="Compare the blob store with the database: list blobs the database "
        "references that are missing, of the wrong size or (--verify) damaged, and blobs no "
        "row references (older than --min-age-hours). Safe while the server runs. Exit status "
        "1 when something is damaged or unreferenced blobs are left.",
    )
    # SUPPRESS: a flag given before `check` (openruns server --db URL check) is kept.
    _add_settings(check, list(_STORE_SETTINGS), default=argparse.SUPPRESS)
    check.add_argument(
        "--verify",
        action="store_true",
        help="also decompress every episode segment and check its frames' checksums "
        "(reads every blob)",
    )
    check.add_argument(
        "--remove-unreferenced",
        action="store_true",
        help="delete the unreferenced blobs found",
    )
    check.add_argument(
        "--min-age-hours",
        type=float,
        default=24.0,
        metavar="H",
        help="only blobs older than this are judged: an upload in progress writes its blob "
        "before the row that references it (default: 24)",
    )
    from ..cli import add_json_option

    add_json_option(
        check,
        'the findings: {"clean", "blobs", "referenced", "damaged": [{"key", "reason"}], '
        '"unreferenced": [{"key", "bytes"}], "removed", "young", "verified", "min_age_hours"}',
    )

    usage = sub.add_parser(
        "usage",
        help="bytes and rows stored per team, project and run",
        description="What the stores hold, read from the database directly (safe while the "
        "server runs): per team, project and run, the blobs (count, bytes) and the rows "
        "(metric rows, episodes, annotations, console lines) with an estimate of their bytes.",
    )
    _add_settings(usage, list(_STORE_SETTINGS), default=argparse.SUPPRESS)
    usage.add_argument("--team", help="only this team (default: every team)")
    usage.add_argument("--project", help="only this project (default: every project)")
    usage.add_argument(
        "--runs", type=int, default=20, metavar="N", help="list the N largest runs (default 20)"
    )
    usage.add_argument("--json", action="store_true", help="one JSON document: every run")

    retention = sub.add_parser(
        "retention",
        help="run one retention pass now (--dry-run: say what it would drop)",
        description="Reduce every ended run older than its retention rule to its metrics, "
        "summary, config, logs and a sample of keep_per_step episodes per (stream, kind, step), "
        "as the server's periodic pass does, and print what was dropped. Safe while servers "
        "run. Exit status 2 when no policy is configured (--retention-days, or [[retention]] "
        "entries in the config file).",
    )
    _add_settings(retention, list(_RETENTION_SETTINGS), default=argparse.SUPPRESS)
    retention.add_argument(
        "--dry-run", action="store_true", help="change nothing: print what would be dropped"
    )
    add_json_option(
        retention,
        'the runs: {"dry_run", "runs": [{"id", "team_id", "project", "rule", "episodes", '
        '"episodes_kept", "episodes_dropped", "bytes_dropped", ...}], "episodes_dropped", '
        '"bytes_dropped"}',
    )


def _add_settings(parser: argparse.ArgumentParser, names: list[str], default: object) -> None:
    """A flag per setting in `names` (generated from ServerSettings), and --config."""
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        metavar="FILE",
        help="the server's config file, TOML (default $OPENRUNS_SERVER_CONFIG, else "
        "$XDG_CONFIG_HOME/openruns/server.toml)",
    )
    for spec in setting_specs():
        if spec.name not in names:
            continue
        flags = [f"--{spec.flag_name}"] + ([spec.alias] if spec.alias else [])
        text = f"{spec.help} (default: {spec.default_text})".replace("%", "%%")
        if spec.kind is bool:
            parser.add_argument(
                *flags, dest=spec.name, action="store_true", default=default, help=text
            )
        else:
            parser.add_argument(
                *flags,
                dest=spec.name,
                type=str if spec.kind is frozenset else spec.kind,  # lists: parsed by resolve
                default=default,
                metavar=spec.metavar,
                help=text,
            )


def run(args: argparse.Namespace) -> int:
    names = [spec.name for spec in setting_specs()]
    try:
        settings = ServerSettings.resolve(
            {name: getattr(args, name, None) for name in names}, config_file=args.config
        )
        if getattr(args, "server_action", None) == "check":
            from .check import run as run_check

            return run_check(args, settings)
        if getattr(args, "server_action", None) == "usage":
            from .usage_cli import run as run_usage

            return run_usage(args, settings)
        if getattr(args, "server_action", None) == "retention":
            from .retention.cli import run as run_retention

            return run_retention(args, settings)
        settings.auth_enabled()  # an unsafe bind fails before the heavy imports
        from .serve import serve

        serve(settings)
    except ServerConfigError as exc:
        print(f"openruns server: {exc}", file=sys.stderr)
        return 2
    return 0
