"""The layering both settings objects share (config_layers.py): where the config file is, reading
it, unknown keys refused, the first layer holding a value, the words for true and false. The
SDK's and the server's own checks are in test_settings.py and test_server_settings.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from openruns.config_layers import (
    FALSE_WORDS,
    TRUE_WORDS,
    first_layer,
    openruns_path,
    parse_bool,
    read_config_file,
    refuse_unknown_keys,
)
from openruns.errors import ConfigurationError
from openruns.server.config import ServerConfigError, ServerSettings, default_data_dir
from openruns.settings import Settings, config_file_path


def test_a_path_is_its_variable_else_under_the_xdg_base_else_under_home() -> None:
    env = {"OPENRUNS_X": "/etc/x.toml", "XDG_CONFIG_HOME": "/c", "XDG_DATA_HOME": "/d"}
    assert openruns_path(env, "OPENRUNS_X", "config", "x.toml") == Path("/etc/x.toml")
    assert openruns_path({**env, "OPENRUNS_X": ""}, "OPENRUNS_X", "config", "x.toml") == Path(
        "/c/openruns/x.toml"
    )
    assert openruns_path(env, "OPENRUNS_Y", "data") == Path("/d/openruns")
    assert openruns_path({}, "OPENRUNS_Y", "data") == Path.home() / ".local/share/openruns"
    assert (
        openruns_path({}, "OPENRUNS_Y", "config", "c.toml")
        == Path.home() / ".config/openruns/c.toml"
    )
    # The SDK's and the server's files are two names under the one rule.
    assert config_file_path({"XDG_CONFIG_HOME": "/c"}) == Path("/c/openruns/config.toml")
    assert default_data_dir({"XDG_DATA_HOME": "/d"}) == Path("/d/openruns")


def test_the_config_file_is_read_or_refused_with_the_callers_error(tmp_path: Path) -> None:
    assert read_config_file(tmp_path / "none.toml", ConfigurationError) == {}
    good = tmp_path / "good.toml"
    good.write_text('dir = "runs"\nport = 1\n')
    assert read_config_file(good, ConfigurationError) == {"dir": "runs", "port": 1}
    bad = tmp_path / "bad.toml"
    bad.write_text("dir = \n")
    with pytest.raises(ConfigurationError, match=f"config file {bad}: "):
        read_config_file(bad, ConfigurationError)
    with pytest.raises(ServerConfigError, match=f"config file {bad}: "):
        read_config_file(bad, ServerConfigError)
    with pytest.raises(ServerConfigError, match="config file"):
        read_config_file(tmp_path, ServerConfigError)  # a directory: unreadable


def test_an_unknown_key_is_refused_naming_it_and_the_known_ones(tmp_path: Path) -> None:
    refuse_unknown_keys({"dir": 1}, ["dir", "mode"], tmp_path / "c.toml", ConfigurationError)
    with pytest.raises(ConfigurationError) as raised:
        refuse_unknown_keys({"colour": 1}, ["mode", "dir"], tmp_path / "c.toml", ConfigurationError)
    assert str(raised.value) == (
        f"config file {tmp_path / 'c.toml'}: unknown keys ['colour']; known keys are "
        "['dir', 'mode']"
    )
    # Both sides name the file they read, also when it was passed rather than found.
    wrong = tmp_path / "passed.toml"
    wrong.write_text("colour = 1\n")
    with pytest.raises(ConfigurationError, match=f"config file {wrong}: unknown keys"):
        Settings.resolve({}, {}, wrong)
    with pytest.raises(ServerConfigError, match=f"config file {wrong}: unknown keys"):
        ServerSettings.resolve({}, {}, wrong)


@pytest.mark.parametrize(
    ("argument", "env", "from_file", "expected"),
    [
        ("arg", {"A": "env"}, {"x": "file"}, ("arg", "the x= argument")),
        (None, {"A": "env", "B": "other"}, {"x": "file"}, ("env", "A")),
        (None, {"A": "", "B": "other"}, {"x": "file"}, ("other", "B")),  # empty: not given
        (None, {"A": ""}, {"x": "file"}, ("file", "x in /c.toml")),
        (None, {}, {"x": 0}, (0, "x in /c.toml")),  # a falsy value in the file still counts
        (0, {"A": "env"}, {}, (0, "the x= argument")),  # and so does a falsy argument
        (None, {}, {"y": 1}, None),  # no layer: the default
    ],
)
def test_the_first_layer_holding_a_value_wins(argument, env, from_file, expected) -> None:
    found = first_layer(
        "x", argument, "the x= argument", env, ("A", "B"), from_file, Path("/c.toml")
    )
    assert found == expected


def test_the_words_for_true_and_false() -> None:
    for word in TRUE_WORDS:
        assert parse_bool(word) is True and parse_bool(f" {word.upper()} ") is True
    for word in FALSE_WORDS:
        assert parse_bool(word) is False and parse_bool(word.title()) is False
    assert parse_bool(True) is True and parse_bool(False) is False
    for bad in ("maybe", "", "2", None):
        with pytest.raises(ValueError, match="use true/false, 1/0, yes/no or on/off"):
            parse_bool(bad)
