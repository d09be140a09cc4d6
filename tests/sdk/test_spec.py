from __future__ import annotations

import pytest

import openruns
from openruns import ConfigSource, TrainingSpec
from openruns.errors import ConfigurationError

from .helpers import run_json


@pytest.mark.parametrize(
    ("filename", "fmt"),
    [
        ("rl.toml", "toml"),
        ("c.json", "json"),
        ("c.yaml", "yaml"),
        ("c.yml", "yaml"),
        ("c.sh", "text"),
    ],
)
def test_config_file_is_stored_byte_for_byte_with_its_format(tmp_path, filename, fmt):
    data = "# comment kept\r\n[trainer]\nlr = 1e-6  # ünïcode\n\n".encode()
    path = tmp_path / filename
    path.write_bytes(data)
    run = openruns.init(config=str(path), mode="offline", dir=tmp_path / "runs")
    run.finish()
    stored = run_json(run.dir)["config"]
    assert stored == {"format": fmt, "text": data.decode(), "filename": filename}
    assert stored["text"].encode() == data


def test_config_mapping_is_stored_as_json(tmp_path):
    run = openruns.init(config={"lr": 1e-6, "nested": {"a": [1, 2]}}, mode="offline", dir=tmp_path)
    run.finish()
    config = run_json(run.dir)["config"]
    assert config["format"] == "json"
    import json

    assert json.loads(config["text"]) == {"lr": 1e-6, "nested": {"a": [1, 2]}}


def test_config_limits(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"x" * (256 * 1024 + 1))
    with pytest.raises(ConfigurationError, match="at most 262144 bytes"):
        ConfigSource.from_file(big)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigurationError, match="not UTF-8"):
        ConfigSource.from_file(binary)
    with pytest.raises(ConfigurationError, match="cannot read"):
        ConfigSource.from_file(tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match="config must be a path"):
        ConfigSource.coerce(42)


def test_training_spec(tmp_path):
    with pytest.raises(ValueError, match="max_steps"):
        TrainingSpec(max_steps=-1)
    with pytest.raises(ConfigurationError, match="only valid with kind='train'"):
        openruns.init(training=TrainingSpec(max_steps=3), mode="offline", dir=tmp_path)
    run = openruns.init(
        kind="train", training=TrainingSpec(max_steps=3, batch_size=8), mode="offline", dir=tmp_path
    )
    run.finish()
    assert run_json(run.dir)["training"] == {"max_steps": 3, "batch_size": 8}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "pretrain"}, "kind must be 'eval' or 'train'"),
        ({"tags": "one"}, "tags must be a list of strings"),
        ({"environments": [3]}, "environments"),
        ({"id": "a/b"}, "id: run id .a/b. is not valid"),
        ({"mode": "online"}, "online mode needs a server"),
    ],
)
def test_init_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        openruns.init(dir=tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())  # nothing was created


def test_run_status():
    assert openruns.RunStatus("failed") is openruns.RunStatus.FAILED
    assert [s.is_terminal() for s in openruns.RunStatus] == [False, True, True, True, True]


def test_cut_text_keeps_within_the_limit_with_a_marker():
    from openruns.spec import MAX_ERROR_CHARS, MAX_LOG_LINE_CHARS, cut_text

    assert cut_text("short", 100) == "short"
    for size in (MAX_LOG_LINE_CHARS, MAX_LOG_LINE_CHARS + 1, 100_000, 1_000_003):
        text = "a" + "x" * (size - 2) + "z"
        for limit in (MAX_LOG_LINE_CHARS, MAX_ERROR_CHARS):
            start, end = cut_text(text, limit), cut_text(text, limit, keep="end")
            assert len(start) <= limit and len(end) <= limit, (size, limit)
            if size > limit:
                assert start.startswith("a") and start.endswith("characters cut]")
                assert end.startswith("[openruns: ") and end.endswith("z")
                cut = int(end.split()[1])
                assert len(end) - len(end.split("\n", 1)[0]) - 1 == size - cut
