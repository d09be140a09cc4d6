"""
`openruns server`: start the tracking server.

The flags are generated from ServerSettings' declaration (config.py), so a new setting is a
flag, a variable and a config key at once. A flag left out is None here, so that
ServerSettings.resolve falls back to OPENRUNS_*, the config file, then the default.

Cheap to import (the `openruns` command imports it to build its parser): FastAPI, SQLAlchemy
and uvicorn are imported in `run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ServerConfigError, ServerSettings, setting_specs

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Start the openruns server: the API under /api/v1 (docs at /api/v1/docs) and the "
        "dashboard at /. By default everything is kept in one data directory: openruns.db "
        "(SQLite, WAL mode) and blobs/; at scale, --db postgresql://... and --blobs "
        "s3://BUCKET/PREFIX let several replicas share one deployment. Auth is off when "
        "listening on a loopback address; any other address needs --auth (API keys) or "
        "--insecure. Every flag is also the variable OPENRUNS_<NAME> and the key <name> of the "
        "config file; a flag wins over the variable, the variable over the file."
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the server's config file, TOML (default $OPENRUNS_SERVER_CONFIG, else "
        "$XDG_CONFIG_HOME/openruns/server.toml)",
    )
    for spec in setting_specs():
        names = [f"--{spec.flag_name}"] + ([spec.alias] if spec.alias else [])
        text = f"{spec.help} (default: {spec.default_text})".replace("%", "%%")
        if spec.kind is bool:
            parser.add_argument(
                *names, dest=spec.name, action="store_true", default=None, help=text
            )
        else:
            parser.add_argument(
                *names,
                dest=spec.name,
                type=str if spec.kind is frozenset else spec.kind,  # lists: parsed by resolve
                default=None,
                metavar=spec.metavar,
                help=text,
            )


def run(args: argparse.Namespace) -> int:
    names = [spec.name for spec in setting_specs()]
    try:
        settings = ServerSettings.resolve(
            {name: getattr(args, name) for name in names}, config_file=args.config
        )
        settings.auth_enabled()  # an unsafe bind fails before the heavy imports
        from .serve import serve

        serve(settings)
    except ServerConfigError as exc:
        print(f"openruns server: {exc}", file=sys.stderr)
        return 2
    return 0
