from __future__ import annotations

import pytest

import openruns
from openruns.errors import ConfigurationError
from openruns.settings import Settings


def _resolve(tmp_path, args=None, env=None, file_text=None):
    path = tmp_path / "config.toml"
    if file_text is not None:
        path.write_text(file_text)
    return Settings.resolve(args or {}, env or {}, path)


def test_argument_beats_environment_beats_file_beats_default(tmp_path):
    file_text = 'dir = "from-file"\nteam_id = "file-team"\nfinish_timeout = 5\n'
    env = {"OPENRUNS_DIR": "from-env", "OPENRUNS_TEAM_ID": "env-team"}
    s = _resolve(tmp_path, {"dir": "from-arg", "team_id": None}, env, file_text)
    assert s.dir == "from-arg"
    assert s.team_id == "env-team"
    assert s.finish_timeout == 5.0
    assert s.on_error == "warn"


def test_mode_defaults_to_online_only_with_a_server(tmp_path):
    assert _resolve(tmp_path).mode == "offline"
    s = _resolve(tmp_path, env={"OPENRUNS_BASE_URL": "http://127.0.0.1:8765/api/v1/"})
    assert s.mode == "online"
    assert s.base_url == "http://127.0.0.1:8765"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"mode": "sometimes"}, "mode must be one of"),
        ({"on_error": "ignore"}, "on_error must be"),
        ({"finish_timeout": "soon"}, "finish_timeout must be a number"),
        ({"finish_timeout": -1}, "finish_timeout must be positive"),
    ],
)
def test_invalid_values_name_the_setting(tmp_path, args, message):
    with pytest.raises(ConfigurationError, match=message):
        _resolve(tmp_path, args)


@pytest.mark.parametrize(
    ("env", "file_text", "args", "named"),
    [
        ({"OPENRUNS_MODE": "bogus"}, None, {}, "(set by OPENRUNS_MODE)"),
        ({"PRIME_RUNS_MODE": "bogus"}, None, {}, "(set by PRIME_RUNS_MODE)"),
        ({}, 'mode = "bogus"\n', {}, "(set by mode in "),
        ({"OPENRUNS_MODE": "offline"}, None, {"mode": "bogus"}, "(set by the mode= argument)"),
        ({"OPENRUNS_CONNECT_TIMEOUT": "-3"}, None, {}, "(set by OPENRUNS_CONNECT_TIMEOUT)"),
    ],
)
def test_an_invalid_value_names_what_set_it(tmp_path, env, file_text, args, named):
    with pytest.raises(ConfigurationError) as raised:
        _resolve(tmp_path, args, env, file_text)
    assert named in str(raised.value)


@pytest.mark.parametrize("argument", ["name", "model", "framework", "description"])
def test_a_text_argument_that_is_not_text_is_refused_before_anything_is_sent(tmp_path, argument):
    with pytest.raises(ConfigurationError, match=f"{argument} must be a string, got int 123"):
        # A server that is not there: a check left to the server would fail otherwise.
        openruns.init(**{argument: 123}, base_url="http://127.0.0.1:9", dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_unknown_config_file_keys_are_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match="unknown keys \\['colour'\\]"):
        _resolve(tmp_path, file_text='colour = "blue"\n')


def test_malformed_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match="config file"):
        _resolve(tmp_path, file_text="dir = \n")


def test_every_setting_is_documented():
    doc = Settings.__doc__ or ""
    for name in Settings.__dataclass_fields__:
        assert f"`{name}`" in doc, name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("127.0.0.1:8791", "did you mean http://127.0.0.1:8791?"),
        ("localhost", "did you mean http://localhost?"),
        ("ftp://example.org", "must be an http:// or https:// URL"),
        ("http://", "must be an http:// or https:// URL with a host"),
        ("http://host:port", "invalid port"),
    ],
)
def test_a_base_url_without_scheme_or_host_is_refused_at_init(tmp_path, value, message):
    with pytest.raises(ConfigurationError, match="base_url") as raised:
        openruns.init(base_url=value, dir=tmp_path)
    assert repr(value) in str(raised.value) and message in str(raised.value)


# -- the prime-runs variables, after OPENRUNS_* ---------------------------------------------


def test_prime_variables_are_fallbacks_after_openruns_ones(tmp_path):
    missing = tmp_path / "none.toml"
    prime = {
        "PRIME_API_KEY": "pk",
        "PRIME_API_BASE_URL": "http://prime.example/api/v1/",
        "PRIME_TEAM_ID": "team-9",
        "PRIME_RUNS_MODE": "Disabled",
    }
    settings = Settings.resolve({}, prime, missing)
    assert (settings.api_key, settings.base_url, settings.team_id, settings.mode) == (
        "pk",
        "http://prime.example",
        "team-9",
        "disabled",
    )
    ours = {
        **prime,
        "OPENRUNS_API_KEY": "ok",
        "OPENRUNS_BASE_URL": "http://openruns.example",
        "OPENRUNS_TEAM_ID": "t",
        "OPENRUNS_MODE": "online",
    }
    settings = Settings.resolve({}, ours, missing)
    assert (settings.api_key, settings.base_url, settings.team_id, settings.mode) == (
        "ok",
        "http://openruns.example",
        "t",
        "online",
    )
    assert Settings.resolve({}, {"PRIME_BASE_URL": "http://b"}, missing).base_url == "http://b"
    assert Settings.resolve({"api_key": "arg"}, prime, missing).api_key == "arg"


# -- the waits connect_timeout stood for (issue 23) -----------------------------------------

WAITS = ("init_timeout", "silent_server_timeout", "metadata_timeout")


def test_each_wait_defaults_to_connect_timeout_and_can_be_set_alone(tmp_path):
    defaults = _resolve(tmp_path)
    assert [getattr(defaults, w) for w in ("connect_timeout", *WAITS)] == [10.0] * 4
    # A job that sets only connect_timeout waits as before: every wait follows it.
    s = _resolve(tmp_path, env={"OPENRUNS_CONNECT_TIMEOUT": "3"})
    assert [getattr(s, w) for w in ("connect_timeout", *WAITS)] == [3.0] * 4
    assert s.origin("init_timeout") == "OPENRUNS_CONNECT_TIMEOUT"
    s = _resolve(
        tmp_path,
        env={"OPENRUNS_CONNECT_TIMEOUT": "3", "OPENRUNS_INIT_TIMEOUT": "0.5"},
        file_text="metadata_timeout = 20\nconnect_timeout = 99\n",
    )
    assert (s.connect_timeout, s.init_timeout, s.silent_server_timeout, s.metadata_timeout) == (
        3.0,
        0.5,
        3.0,
        20.0,
    )
    assert s.origin("metadata_timeout").startswith("metadata_timeout in ")


@pytest.mark.parametrize("name", WAITS)
def test_a_wait_must_be_a_positive_number_named_with_what_set_it(tmp_path, name):
    variable = f"OPENRUNS_{name.upper()}"
    with pytest.raises(
        ConfigurationError, match=rf"{name} must be positive.*\(set by {variable}\)"
    ):
        _resolve(tmp_path, env={variable: "0"})
    with pytest.raises(ConfigurationError, match=f"{name} must be a number"):
        _resolve(tmp_path, file_text=f'{name} = "soon"\n')
