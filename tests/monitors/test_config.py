"""MonitorsConfig: reading TOML tables, and one config for every component of a launch."""

from __future__ import annotations

import asyncio

import pytest

from openruns import ConfigurationError
from openruns.monitors import (
    FileMonitorConfig,
    MonitorsConfig,
    OpenrunsMonitorConfig,
    WandbMonitorConfig,
    merge_monitors,
)
from openruns.monitors.config import MONITORS_ENV


def _merge(shared, own):
    return merge_monitors(shared, own, shared_where="[monitors]", own_where='"trainer" monitors')


def test_tables_switches_and_defaults():
    config = MonitorsConfig.from_mapping(
        {"file": {}, "wandb": {"project": "rl", "tags": ["a"]}, "openruns": False}
    )
    assert config == MonitorsConfig(
        file=FileMonitorConfig(), wandb=WandbMonitorConfig(project="rl", tags=("a",))
    )
    assert MonitorsConfig.from_mapping({"openruns": True}).openruns == OpenrunsMonitorConfig()
    assert MonitorsConfig.from_mapping(config.to_mapping()) == config


def test_the_shared_block_fills_each_component():
    merged = _merge({"file": {"chunk_bytes": 1000}, "wandb": {"project": "rl"}}, {"file": {}})
    assert merged.file == FileMonitorConfig(chunk_bytes=1000)
    assert merged.wandb == WandbMonitorConfig(project="rl")
    # The same value in both places is accepted (a materialized config round-trips).
    assert _merge({"wandb": {"project": "rl"}}, {"wandb": {"project": "rl"}}).wandb is not None
    assert _merge({"file": True}, {"file": {"chunk_bytes": 5}}).file.chunk_bytes == 5
    assert _merge(None, None) == MonitorsConfig()


def test_a_field_set_differently_in_both_places_names_both():
    with pytest.raises(ConfigurationError) as info:
        _merge(
            {"wandb": {"project": "rl", "entity": "me"}, "file": {"chunk_bytes": 1}},
            {"wandb": {"project": "other", "entity": "me"}, "file": {"chunk_bytes": 2}},
        )
    message = str(info.value)
    assert "wandb.project: [monitors].wandb sets 'rl', \"trainer\" monitors.wandb sets 'other'" in (
        message
    )
    assert "file.chunk_bytes: [monitors].file sets 1" in message
    assert "entity" not in message  # equal values are no conflict


def test_on_in_one_place_and_off_in_the_other_is_a_conflict():
    with pytest.raises(ConfigurationError, match=r"file: \[monitors\].file is on \(a table\)"):
        _merge({"file": {}}, {"file": False})
    with pytest.raises(ConfigurationError, match="wandb: .* is off, .* is on"):
        _merge({"wandb": False}, {"wandb": True})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"files": {}}, r"unknown monitors \['files'\]"),
        ({"file": {"chunk": 1}}, r"\[monitors\].file: unknown keys \['chunk'\]"),
        ({"file": {"chunk_bytes": "1"}}, "chunk_bytes must be an integer"),
        ({"file": {"chunk_bytes": 0}}, "must be positive"),
        ({"file": {"subsets": ["some"]}}, "not among"),
        ({"wandb": {"tags": "a"}}, "must be a list of strings"),
        ({"wandb": {"mode": "shared"}}, "wandb.mode"),
        ({"openruns": {"cohorts": ["train/all", "x"]}}, "cohorts"),
        ({"file": 3}, "must be a table, true or false"),
    ],
)
def test_invalid_values_name_the_key(data, message):
    with pytest.raises(ConfigurationError, match=message):
        MonitorsConfig.from_mapping(data)


def test_from_env(monkeypatch):
    assert MonitorsConfig.from_env() is None
    monkeypatch.setenv(MONITORS_ENV, '{"file": {"chunk_bytes": 7}, "wandb": false}')
    assert MonitorsConfig.from_env() == MonitorsConfig(file=FileMonitorConfig(chunk_bytes=7))
    monkeypatch.setenv(MONITORS_ENV, "{not json")
    with pytest.raises(ConfigurationError, match="not JSON"):
        MonitorsConfig.from_env()


def test_a_monitor_is_added_by_one_registration(monkeypatch, tmp_path):
    from openruns.monitors import Monitors
    from openruns.monitors.config import MONITOR_TYPES, MonitorType

    from .helpers import EchoConfig, EchoMonitor

    monkeypatch.setitem(
        MONITOR_TYPES, "echo", MonitorType(EchoConfig, "tests.monitors.helpers", "EchoMonitor")
    )
    config = MonitorsConfig.from_mapping({"echo": {"prefix": "p"}, "file": False})
    assert config.echo == EchoConfig(prefix="p") and config.to_mapping()["echo"] == {"prefix": "p"}
    merged = _merge({"echo": {"prefix": "p"}}, {"echo": {}})
    assert merged.echo == EchoConfig(prefix="p")

    async def main():
        monitors = Monitors.from_config(config, producer="trainer", output_dir=tmp_path)
        await monitors.log({"x": 1.0}, step=2)
        await monitors.finalize()
        return monitors

    EchoMonitor.seen.clear()
    assert asyncio.run(main()).names == ["echo"]
    assert EchoMonitor.seen == [("p", "trainer", 2, {"x": 1.0})]
    with pytest.raises(ConfigurationError, match="unknown monitors"):
        MonitorsConfig(nope=True)
