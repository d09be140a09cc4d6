"""The `openruns` command as a whole: version, and help that states every default."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

import openruns
from openruns.cli import build_parser, main, server_settings
from openruns.settings import DEFAULT_SERVER_URL


def test_version():
    done = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"openruns {openruns.__version__}"


def _value_options() -> list[tuple[str, argparse.Action]]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, command in commands.choices.items():
        for action in command._actions:
            takes_value = action.nargs != 0 and not isinstance(action, argparse._HelpAction)
            optional = bool(action.option_strings) or action.nargs in ("*", "?")
            if takes_value and optional:
                found.append((name, action))
    return found


@pytest.mark.parametrize(
    ("command", "action"),
    _value_options(),
    ids=lambda v: v if isinstance(v, str) else "/".join(v.option_strings or [v.dest]),
)
def test_every_option_states_its_default(command, action):
    assert "default" in (action.help or "").lower(), (
        f"openruns {command} {'/'.join(action.option_strings) or action.dest}: "
        f"the help does not state the default: {action.help!r}"
    )


def _parsers(parser: argparse.ArgumentParser, path: str = "openruns"):
    """Every parser of the command line, subcommands of subcommands included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_flag_a_help_names_exists(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # no flag cut at its hyphens by the line wrapping
    parsers = list(_parsers(build_parser()))
    known = {flag for _, p in parsers for a in p._actions for flag in a.option_strings}
    for path, parser in parsers:
        for named in re.findall(r"--[a-z][a-z0-9-]*", parser.format_help()):
            assert named in known, f"`{path} --help` names {named}, which is no option"


@pytest.fixture
def server(tmp_path):
    from openruns.server import serve_in_thread

    handle = serve_in_thread(data_dir=tmp_path / "server-data")
    yield handle
    handle.stop()


@pytest.mark.parametrize("where", ["before", "after"])
def test_runs_takes_the_server_options_before_or_after_its_action(server, capsys, where):
    created = main(["runs", "--base-url", server.url, "create", "--name", "here"])
    run_id = capsys.readouterr().out.strip()
    options = ["--base-url", server.url]
    argv = ["runs", *options, "ls"] if where == "before" else ["runs", "ls", *options]
    assert (created, main(argv)) == (0, 0)
    listed = capsys.readouterr().out
    assert run_id in listed and "here" in listed


def test_sync_and_runs_default_to_the_servers_default_address():
    from openruns.server.config import DEFAULT_PORT

    for argv in (["sync"], ["runs", "ls"]):
        args = build_parser().parse_args(argv)
        settings = server_settings(args)
        assert settings.base_url == DEFAULT_SERVER_URL == f"http://127.0.0.1:{DEFAULT_PORT}"
        assert settings.origin("base_url") == "the default server address"


def test_runs_show_leaves_out_the_prime_runs_sdks_own_summary_keys(server, capsys):
    import httpx

    main(["runs", "--base-url", server.url, "create", "--name", "eval"])
    run_id = capsys.readouterr().out.strip()
    summary = {"accuracy": 0.5, "prime_runs/traces_episodes_written": 12}
    httpx.patch(f"{server.url}/api/v1/runs/{run_id}", json={"summary": summary}, timeout=30)
    assert main(["runs", "show", run_id, "--base-url", server.url]) == 0
    shown = capsys.readouterr().out
    assert 'summary: {"accuracy":0.5}' in shown and "prime_runs" not in shown
    assert main(["runs", "show", run_id, "--json", "--base-url", server.url]) == 0
    assert "prime_runs/traces_episodes_written" in capsys.readouterr().out  # kept, stored
