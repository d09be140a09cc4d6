"""The `openruns` command. Each subcommand lives in its own module and is imported on use."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from typing import Any, TextIO

from ._version import __version__

__all__ = [
    "add_json_option",
    "add_server_options",
    "build_parser",
    "main",
    "print_json",
    "server_settings",
]

# name -> (module, help). Each module has `add_arguments(parser)` and `run(args) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("openruns.demo", "stream a simulated RL run and an eval (offline or into a server)"),
    "server": ("openruns.server.cli", "start the tracking server (API and dashboard)"),
    "keys": ("openruns.server.keys_cli", "create, list and revoke the server's API keys"),
    "sync": ("openruns.sync", "upload offline runs and leftover spools to a server"),
    "runs": ("openruns.runs_cli", "create, finish, list, show and delete runs on a server"),
    "alerts": ("openruns.alerts_cli", "alert rules (webhooks) and their delivery log on a server"),
    "run": ("openruns.launch.run_command", "own a run around one command: openruns run -- CMD"),
    "launch": ("openruns.launch.launch_command", "start a job's components under one run"),
    "mcp": ("openruns.mcp_server.command", "serve the read API to coding agents (MCP over stdio)"),
}


def add_server_options(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """--base-url and --api-key of a command that talks to a server (`sync`, `runs`). Also on
    each subcommand of one (`nested`), so they are taken in either place: `openruns runs ls
    --base-url URL` as `openruns runs --base-url URL ls` (issue 24)."""
    from .settings import DEFAULT_SERVER_URL

    default = argparse.SUPPRESS if nested else None  # a subcommand keeps what came before it
    parser.add_argument(
        "--base-url",
        default=default,
        help=f"the server (default: OPENRUNS_BASE_URL, the config file, else {DEFAULT_SERVER_URL})",
    )
    parser.add_argument(
        "--api-key", default=default, help="an API key (default: OPENRUNS_API_KEY, config file)"
    )


def add_json_option(parser: argparse.ArgumentParser, what: str) -> None:
    """--json of a read command: `what` as one JSON document on stdout instead of text (the
    fields are documented in docs/agents.md); errors stay one line on stderr, exit non-zero."""
    parser.add_argument(
        "--json", action="store_true", help=f"print {what} as one JSON document (default: text)"
    )


def print_json(document: Any, out: TextIO | None = None) -> None:
    """`document` as one line of JSON on `out` (stdout)."""
    import orjson

    out = out or sys.stdout
    out.write(orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    out.flush()


def server_settings(args: argparse.Namespace) -> Any:
    """The settings of a command with server options: the server's default address when
    neither the options, the environment nor the config file name one."""
    from .settings import DEFAULT_SERVER_URL, Settings

    arguments = {"base_url": args.base_url, "api_key": args.api_key}
    settings = Settings.resolve(arguments)
    if settings.base_url is None:
        settings = Settings.resolve({**arguments, "base_url": DEFAULT_SERVER_URL})
        settings = dataclasses.replace(
            settings, origins={**settings.origins, "base_url": "the default server address"}
        )
    return settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openruns", description="openruns: a run tracker")
    parser.add_argument("--version", action="version", version=f"openruns {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(_module=module)
        _module(module).add_arguments(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(_module(args._module).run(args) or 0)
    except KeyboardInterrupt:
        return 130


def _module(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = exc.name or "a dependency"
        sys.exit(
            f"openruns: this command needs {missing}, which is not installed; "
            "install the server extra: pip install '.[server]' in a checkout (or `uv run "
            "--extra server openruns ...`), or from the git URL (README, Install)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
