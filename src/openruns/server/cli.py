"""
`openruns server`: start the tracking server.

Cheap to import (the `openruns` command imports it to build its parser): FastAPI, SQLAlchemy
and uvicorn are imported in `run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import DEFAULT_PORT, ServerConfigError, ServerSettings

__all__ = ["add_arguments", "run"]

MiB = 1024 * 1024
_DEFAULTS = ServerSettings(data_dir=Path("."))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Start the openruns server: the API under /api/v1 (docs at /api/v1/docs) and the "
        "dashboard at /. Everything is kept in one data directory: openruns.db (SQLite, WAL "
        "mode) and blobs/. Auth is off when listening on a loopback address; any other "
        "address needs --auth (API keys) or --insecure."
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    parser.add_argument(
        "-p",
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port (default %(default)s; 0 picks a free one)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default $OPENRUNS_DATA_DIR, else $XDG_DATA_HOME/openruns, "
        "i.e. ~/.local/share/openruns)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--auth",
        action="store_true",
        default=None,
        help="require an API key on every request (create keys with `openruns keys create`)",
    )
    mode.add_argument(
        "--insecure",
        action="store_true",
        help="accept unauthenticated requests on a non-loopback address",
    )
    parser.add_argument(
        "--public-url",
        default=None,
        help=(
            "the URL users reach the server at, for absolute run links "
            "(e.g. https://runs.example.com; default: relative links)"
        ),
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=_DEFAULTS.heartbeat_timeout,
        metavar="S",
        help="a running run silent this long is marked crashed (default %(default)g s)",
    )
    parser.add_argument(
        "--finish-grace",
        type=float,
        default=_DEFAULTS.finish_grace,
        metavar="S",
        help="uploads to a finished run are accepted this long after it finished "
        "(default %(default)g s)",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=_DEFAULTS.rate_limit,
        metavar="N",
        help="requests per second per API key or run token; 0: unlimited (default %(default)g)",
    )
    parser.add_argument(
        "--rate-burst",
        type=int,
        default=_DEFAULTS.rate_burst,
        metavar="N",
        help="burst size of the rate limit (default %(default)s)",
    )
    parser.add_argument(
        "--max-body-mib",
        type=int,
        default=_DEFAULTS.max_body_bytes // MiB,
        metavar="MIB",
        help="largest upload body, as sent (default %(default)s MiB)",
    )
    parser.add_argument(
        "--max-decompressed-mib",
        type=int,
        default=_DEFAULTS.max_decompressed_bytes // MiB,
        metavar="MIB",
        help="largest upload body once decompressed (default %(default)s MiB)",
    )
    parser.add_argument(
        "--max-ingest-requests",
        type=int,
        default=_DEFAULTS.max_ingest_requests,
        metavar="N",
        help="uploads processed at once; more get 503 + Retry-After (default %(default)s)",
    )
    parser.add_argument(
        "--max-ingest-mib",
        type=int,
        default=_DEFAULTS.max_ingest_bytes // MiB,
        metavar="MIB",
        help="upload bytes in flight at once; more get 503 + Retry-After (default %(default)s MiB)",
    )
    parser.add_argument(
        "--prime-training-teams",
        type=_team_list,
        default=None,
        metavar="TEAM,...",
        help="teams that may create external training runs through the Prime wire "
        "(prime-runs kind='train'); others get 403 with the reason (default: every team)",
    )


def _team_list(value: str) -> frozenset[str]:
    return frozenset(t.strip() for t in value.split(",") if t.strip())


def run(args: argparse.Namespace) -> int:
    from .config import default_data_dir

    settings = ServerSettings(
        data_dir=args.data_dir or default_data_dir(),
        host=args.host,
        port=args.port,
        auth=args.auth,
        insecure=args.insecure,
        public_url=args.public_url,
        heartbeat_timeout=args.heartbeat_timeout,
        finish_grace=args.finish_grace,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        max_body_bytes=args.max_body_mib * MiB,
        max_decompressed_bytes=args.max_decompressed_mib * MiB,
        max_ingest_requests=args.max_ingest_requests,
        max_ingest_bytes=args.max_ingest_mib * MiB,
        prime_training_teams=args.prime_training_teams,
    )
    try:
        settings.auth_enabled()  # an unsafe bind fails before the heavy imports
        from .serve import serve

        serve(settings)
    except ServerConfigError as exc:
        print(f"openruns server: {exc}", file=sys.stderr)
        return 2
    return 0
