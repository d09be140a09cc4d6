"""`openruns demo --offline`: the sweep as real processes, each run as the README promises."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from openruns.rundir import iter_stream, read_json


def test_the_demo_writes_a_sweep_an_eval_and_a_failed_run(tmp_path):
    env = {**os.environ, "OPENRUNS_SYSTEM_METRICS_INTERVAL": "1", "OPENRUNS_CAPTURE_CONSOLE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "demo", "--offline", "--dir", str(tmp_path)]
        + ["--steps", "12", "--rollouts", "2", "--interval", "0.2"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "as planned, demo-lr3e-05 failed" in done.stdout
    runs = {}
    for run_dir in tmp_path.iterdir():
        doc = read_json(run_dir / "run.json") if run_dir.is_dir() else None
        if doc is not None:
            runs[doc["name"]] = (doc, run_dir)
    assert set(runs) == {"demo-eval", "demo-rl-lr1e-06", "demo-rl-lr3e-06", "demo-rl-lr3e-05"}
    failed, failed_dir = runs["demo-rl-lr3e-05"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("FloatingPointError: loss is NaN at step 7")
    train, train_dir = runs["demo-rl-lr1e-06"]
    assert train["status"] == "completed" and train["group"] == "demo-sweep"
    assert runs["demo-rl-lr3e-06"][0]["config"] != train["config"]  # what compare shows
    episodes = list(iter_stream(train_dir, "episodes"))
    assert {e.get("kind") or e["run"]["work"]["type"] for e in episodes} == {"train", "eval"}
    annotations = list(iter_stream(train_dir, "annotations"))
    assert len(annotations) == 12 * 2 and {a["producer"] for a in annotations} == {"trainer"}
    rows = list(iter_stream(train_dir, "metrics"))
    # What each worker printed is kept with its run, and the failed one's traceback.
    printed = [r["line"] for r in iter_stream(train_dir, "logs") if r["stream"] == "stdout"]
    assert "demo-rl-lr1e-06: step 3: loss" in " ".join(printed)
    tracebacks = [r["line"] for r in iter_stream(failed_dir, "logs") if r["stream"] == "traceback"]
    assert len(tracebacks) == 1 and "FloatingPointError: loss is NaN" in tracebacks[0]
    timed = [r for r in rows if r["step"] is None]
    assert any("inference/tokens_per_s" in r["values"] for r in timed)
    assert any("system/memory/used_percent" in r["values"] for r in timed)


def test_the_demo_on_a_busy_port_says_so_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "openruns.cli", "demo", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"openruns demo: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another port: --port N)"
    ]
    assert list(tmp_path.iterdir()) == []  # the demo's store is a temporary one, removed
