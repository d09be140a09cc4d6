"""The `openruns` command as a whole: version, and help that states every default."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import openruns
from openruns.cli import build_parser


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
