"""
A W&B run as an openruns run: the real wandb 0.31.0 SDK in a subprocess logs one run that
uses every part of a run's life the wire maps (fields, config, steps explicit, implicit and
`commit=False`, nested keys, define_metric, summary, console output, system metrics,
wandb-metadata.json), read back through the native API.
"""

from __future__ import annotations

import uuid

import pytest

from .helpers import api, run_script

SCRIPT = """
import sys
import wandb


run = wandb.init(
    project="wire-tests", id=sys.argv[1], name="a display name", notes="some notes",
    tags=["rl", "grpo"], group="sweep-7", job_type="train",
    config={"lr": 0.001, "model": {"layers": 2}},
)
run.define_metric("env/step")
run.define_metric("env/*", step_metric="env/step")
run.define_metric("eval/acc", step_metric="eval/epoch")
run.log({"loss": 1.0, "reward": {"mean": 0.5}})          # implicit: step 0
run.log({"loss": 0.5})                                    # implicit: step 1
run.log({"loss": 0.25}, step=5)                           # explicit
run.log({"partial": 7.0}, commit=False)                   # joined to the next row
run.log({"loss": 0.125})                                  # step 5 again: the pending row
run.log({"env/step": 100, "env/return": 3.5})
run.log({"eval/epoch": 2, "eval/acc": 0.9})
run.log({"bad": float("nan"), "flag": True})
run.summary["best_loss"] = 0.125
run.summary.update({"final": {"reward": 0.75}})
print("hello from the script")
print("a warning", file=sys.stderr)
run.finish()
"""


@pytest.fixture(scope="module")
def logged(server, tmp_path_factory):
    run_id = f"w{uuid.uuid4().hex[:10]}"
    run_script(tmp_path_factory.mktemp("runs"), SCRIPT, server.url, run_id)
    return run_id


def test_run_fields_are_the_runs(client, logged):
    run = client.run(logged)
    assert run["status"] == "completed" and run["error"] is None
    assert run["name"] == "a display name"
    assert run["notes"] == "some notes"
    assert run["tags"] == ["rl", "grpo"]
    assert run["group"] == "sweep-7"
    assert run["project"] == "wire-tests"
    assert run["team_id"] == "default"  # the entity: auth off, no entity named
    assert run["kind"] == "train"
    assert logged in {r["id"] for r in client.runs(project="wire-tests")}
    assert logged not in {r["id"] for r in client.runs(project="another-project")}


def test_config_yaml_is_the_config_byte_for_byte_and_its_values_readable(client, server, logged):
    config = client.run(logged)["config"]
    assert config["format"] == "yaml" and config["filename"] == "config.yaml"
    assert "lr:\n    value: 0.001\n" in config["text"]
    side = api(server, f"/runs/{logged}/wandb")
    assert side["config_values"]["lr"] == 0.001
    assert side["config_values"]["model"] == {"layers": 2}
    assert side["job_type"] == "train"
    assert side["metadata"]["python"].startswith("CPython 3.")
    assert side["metadata"]["program"].endswith(".py")
    assert {"config.yaml", "wandb-metadata.json", "wandb-summary.json"} <= set(side["files"])


def test_history_rows_are_metric_rows_at_their_steps(client, logged):
    rows = client.metrics(logged)
    by_key: dict[str, dict[int, float]] = {}
    for row in rows:
        if row["step"] is not None:
            by_key.setdefault(row["key"], {})[row["step"]] = row["value"]
    assert by_key["loss"] == {0: 1.0, 1: 0.5, 5: 0.125}  # a later row of step 5 wins
    assert by_key["reward/mean"] == {0: 0.5}  # nested dicts flatten to a/b
    assert by_key["partial"] == {5: 7.0}  # commit=False joined the next row
    assert by_key["env/return"] == {6: 3.5}
    assert by_key["flag"] == {8: 1}
    assert "bad" not in by_key  # NaN is dropped, as the native SDK drops it
    stamps = [r["ts"] for r in client.metrics(logged, keys=["loss"])]
    assert all(ts is None for ts in stamps)  # the read shows step rows' ts as None


def test_define_metric_is_stored_with_the_metric(server, logged):
    keys = {k["key"]: k for k in api(server, f"/runs/{logged}/metrics/keys")}
    assert keys["env/return"]["step_metric"] == "env/step"  # a glob definition
    assert keys["eval/acc"]["step_metric"] == "eval/epoch"
    assert keys["env/step"]["step_metric"] is None
    assert keys["loss"]["step_metric"] is None


def test_summary_is_the_runs_summary(client, logged):
    summary = client.run(logged)["summary"]
    assert summary["best_loss"] == 0.125
    assert summary["final"] == {"reward": 0.75}
    assert summary["loss"] == 0.125
    assert "_wandb" not in summary


def test_console_output_is_the_runs_console(client, logged):
    lines = [(line["stream"], line["line"]) for line in client.logs(logged)]
    assert ("stdout", "hello from the script") in lines
    assert ("stderr", "a warning") in lines


def test_system_metrics_are_the_native_system_group(client, logged):
    timed = [r for r in client.metrics(logged) if r["step"] is None]
    keys = {r["key"] for r in timed}
    assert "system/memory_percent" in keys
    assert any(k.startswith("system/proc/memory/") for k in keys)
    assert all(k.startswith("system/") for k in keys)
    assert all(isinstance(r["ts"], float) for r in timed)
