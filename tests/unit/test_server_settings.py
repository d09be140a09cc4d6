"""ServerSettings: one declaration, layered argument > OPENRUNS_* > config file > default, and
the flags of `openruns server` generated from it."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from pathlib import Path

import pytest

from openruns.server import cli
from openruns.server.config import (
    MiB,
    ServerConfigError,
    ServerSettings,
    config_file_path,
    setting_specs,
)


def test_every_field_has_a_flag_with_its_default_in_the_help():
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    flags = {opt: action for action in parser._actions for opt in action.option_strings}
    for field in dataclasses.fields(ServerSettings):
        if field.metadata.get("file_only"):  # [[retention]]: config file entries, no flag
            continue
        spec = next(s for s in setting_specs() if s.field == field.name)
        action = flags[f"--{spec.flag_name}"]
        assert "(default: " in action.help, spec.name
        assert action.default is None  # unset flags fall through to the other layers
    assert "--db" in flags and "-p" in flags
    assert "(default: 512 MiB)" in flags["--max-body-mib"].help
    assert "(default: 45 s)" in flags["--heartbeat-timeout"].help
    assert "(default: off)" in flags["--auth"].help


def test_layers_argument_then_environment_then_file_then_default(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(
        'database_url = "postgresql://file/db"\nport = 9000\nrate_burst = 7\n'
        'max_body_mib = 2\nblobs = "s3://file-bucket"\n'
    )
    env = {
        "OPENRUNS_PORT": "9100",
        "OPENRUNS_BLOBS": "s3://env-bucket/p",
        "OPENRUNS_AUTH": "yes",
        "OPENRUNS_DATABASE_URL": "",  # empty: not given
    }
    settings = ServerSettings.resolve({"port": 9200}, env, config)
    assert settings.port == 9200  # argument
    assert settings.blobs == "s3://env-bucket/p"  # environment over the file
    assert settings.auth is True
    assert settings.database_url == "postgresql://file/db"  # file
    assert settings.rate_burst == 7 and settings.max_body_bytes == 2 * MiB
    assert settings.heartbeat_timeout == 45.0  # default
    assert settings.sqlalchemy_url() == "postgresql+psycopg://file/db"

    defaults = ServerSettings.resolve({}, {"XDG_DATA_HOME": str(tmp_path)}, tmp_path / "none")
    assert defaults.sqlalchemy_url() == f"sqlite:///{tmp_path}/openruns/openruns.db"
    assert defaults.blob_location() == f"{tmp_path}/openruns/blobs"


def test_bad_values_name_their_source(tmp_path):
    with pytest.raises(ServerConfigError, match="OPENRUNS_PORT: expected an integer"):
        ServerSettings.resolve({}, {"OPENRUNS_PORT": "http"}, tmp_path / "none")
    with pytest.raises(ServerConfigError, match="OPENRUNS_AUTH: expected true or false"):
        ServerSettings.resolve({}, {"OPENRUNS_AUTH": "maybe"}, tmp_path / "none")
    bad = tmp_path / "bad.toml"
    bad.write_text("max_body_bytes = 3\n")
    with pytest.raises(ServerConfigError, match=r"unknown keys \['max_body_bytes'\]"):
        ServerSettings.resolve({}, {}, bad)
    bad.write_text("port = -1\n")
    with pytest.raises(ServerConfigError, match=r"port in .*bad.toml: expected an integer"):
        ServerSettings.resolve({}, {}, bad)
    bad.write_text("port = [\n")
    with pytest.raises(ServerConfigError, match="bad.toml"):
        ServerSettings.resolve({}, {}, bad)
    with pytest.raises(ServerConfigError, match="contradict"):
        ServerSettings.resolve({"auth": True, "insecure": True}, {}, tmp_path / "none")
    with pytest.raises(ServerConfigError, match="unsupported database 'mysql'"):
        ServerSettings(database_url="mysql://x/y").sqlalchemy_url()


def test_the_config_file_location():
    assert config_file_path({"OPENRUNS_SERVER_CONFIG": "/etc/o.toml"}) == Path("/etc/o.toml")
    assert config_file_path({"XDG_CONFIG_HOME": "/c"}) == Path("/c/openruns/server.toml")


def test_the_command_line_reaches_the_settings(tmp_path, monkeypatch):
    """Flags, variables and the --config file meet in the settings `openruns server` starts."""
    seen = []
    # The module, not the package's lazy name `serve` (the function).
    monkeypatch.setattr(importlib.import_module("openruns.server.serve"), "serve", seen.append)
    config = tmp_path / "s.toml"
    config.write_text("rate_limit = 5.5\n")
    monkeypatch.setenv("OPENRUNS_MAX_INGEST_REQUESTS", "3")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--config", str(config), "--db", "sqlite:////x.db", "-p", "0"])
    assert cli.run(args) == 0
    (settings,) = seen
    assert (settings.database_url, settings.port) == ("sqlite:////x.db", 0)
    assert (settings.rate_limit, settings.max_ingest_requests) == (5.5, 3)


def test_auth_is_off_on_loopback_and_required_elsewhere():
    assert ServerSettings(host="127.0.0.1").auth_enabled() is False
    assert ServerSettings(host="::1").auth_enabled() is False
    assert ServerSettings(host="localhost").auth_enabled() is False
    assert ServerSettings(host="0.0.0.0", auth=True).auth_enabled() is True
    assert ServerSettings(host="0.0.0.0", insecure=True).auth_enabled() is False
    with pytest.raises(ServerConfigError, match="--auth .* or --insecure"):
        ServerSettings(host="0.0.0.0").auth_enabled()
    with pytest.raises(ServerConfigError):
        ServerSettings(host="10.1.2.3").auth_enabled()
