"""
`openruns mcp`: serve a server's runs to an agent over stdio. The agent's client starts it:

    {"mcpServers": {"openruns": {"command": "openruns", "args": ["mcp"],
                                 "env": {"OPENRUNS_BASE_URL": "http://127.0.0.1:8765"}}}}

The server and key come from --base-url / --api-key, else OPENRUNS_BASE_URL / OPENRUNS_API_KEY,
the config file, else the server's default address, as for `openruns runs`. Stdout carries the
protocol only; anything else goes to stderr. Cheap to import (`openruns` builds its parser from
every command): `mcp` is imported in `run`.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]

PROG = "openruns mcp"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..cli import add_server_options

    parser.description = (
        "Serve a server's runs to a coding agent as an MCP server over stdio (the Model Context "
        "Protocol): read-only tools for runs, a run, metrics, steps, episodes, an episode, "
        "search and console logs, each answer bounded. Start it from the agent's MCP config. "
        "Needs the extra mcp: pip install 'openruns[mcp]'."
    )
    add_server_options(parser)


def run(args: argparse.Namespace) -> int:
    try:
        from . import tools
    except ImportError as exc:
        print(
            f"{PROG}: needs the mcp package ({exc.name or 'a dependency'} is not installed): "
            "pip install 'openruns[mcp]' (in a checkout: pip install '.[mcp]', or `uv run "
            "--extra mcp openruns mcp`)",
            file=sys.stderr,
        )
        return 2
    from ..api import Client
    from ..cli import server_settings
    from ..errors import ConfigurationError

    try:
        settings = server_settings(args)
        client = Client(settings.base_url, settings.api_key)
    except ConfigurationError as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"{PROG}: the runs of {client.base_url}, over stdio", file=sys.stderr)
    try:
        tools.build_server(client).run("stdio")
    finally:
        client.close()
    return 0
