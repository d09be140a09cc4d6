from __future__ import annotations

import pytest

import openruns
from openruns import TrainingSpec
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
