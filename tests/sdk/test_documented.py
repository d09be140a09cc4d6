"""
docs/prime-runs.md says what `init(id=)` and a row without a step do, in a table between
`<!-- documented: init-id -->` markers: this test reads that table and checks each row against
the SDK (offline runs, real run directories), so the page and the code cannot drift apart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import openruns
from openruns.rundir import read_json

from .helpers import records

DOC = Path(__file__).resolve().parents[2] / "docs" / "prime-runs.md"


def _documented(name: str) -> dict[str, str]:
    text = DOC.read_text()
    block = text.split(f"<!-- documented: {name} -->", 1)[1].split(f"<!-- end: {name} -->", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in block.strip().splitlines()[2:]]
    return {call.strip().strip("`"): does.strip() for call, does in rows}


def _status(run) -> str:
    return read_json(run.dir / "run.json")["status"]


def _resume(tmp_path: Path, monkeypatch) -> str:
    run = openruns.init(id="resumed", mode="offline", dir=tmp_path)
    run.fail("RuntimeError: boom")
    failed = _status(run)
    again = openruns.init(id="resumed", mode="offline", dir=tmp_path)
    again.finish()
    if (failed, _status(again)) == ("failed", "completed"):
        return "resumes X: this process sets every status"
    return f"observed {failed}, {_status(again)}"


def _train_id(tmp_path: Path, monkeypatch) -> str:
    # Runs a scheduler created elsewhere: their ids are not in this process's environment.
    creators = [openruns.init(id=i, mode="offline", dir=tmp_path) for i in ("a", "b")]
    for name in ("OPENRUNS_RUN_ID", "RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    failing = openruns.init(kind="train", id="a", mode="offline", dir=tmp_path)
    failing.fail("RuntimeError: boom")
    clean = openruns.init(kind="train", id="b", mode="offline", dir=tmp_path)
    clean.finish()
    seen = (_status(failing), _status(clean))
    for creator in creators:
        creator.finish()
    if seen == ("running", "completed"):
        return "prime-rl's contract: a clean finish completes X, a failure is left to its creator"
    return f"observed {seen}"


def _run_id_from_the_environment(tmp_path: Path, monkeypatch) -> str:
    creator = openruns.init(kind="train", mode="offline", dir=tmp_path)
    monkeypatch.setenv("RUN_ID", creator.id)  # what a platform passes to each pod
    pod = openruns.init(kind="train", id=os.environ["RUN_ID"], mode="offline", dir=tmp_path)
    pod.log_metrics({"loss": 1.0}, step=0)
    pod.finish()
    after_pod = _status(creator)
    creator.finish()
    flushed = [r["values"] for r in records(creator.dir, "metrics")] == [{"loss": 1.0}]
    if pod.attached and flushed and (after_pod, _status(creator)) == ("running", "completed"):
        return "attaches: this process only flushes, its creator sets the status"
    return f"observed attached={pod.attached} flushed={flushed} {after_pod}"


def _row_without_a_step(tmp_path: Path, monkeypatch) -> str:
    run = openruns.init(kind="train", mode="offline", dir=tmp_path)
    run.log_metrics({"loss": 1.0}, step=5)
    run.log_metrics({"inference/queue": 3.0})
    run.finish()
    rows = [(r["step"], r["values"]) for r in records(run.dir, "metrics")]
    timed = [r for r in records(run.dir, "metrics") if r["step"] is None]
    if rows == [(5, {"loss": 1.0}), (None, {"inference/queue": 3.0})] and timed[0]["ts"] > 0:
        return "a row keyed by its time, never folded into a step"
    return f"observed {rows}"


CHECKS: dict[str, Callable[[Path, object], str]] = {
    "pr.init(id=X)": _resume,
    'pr.init(kind="train", id=X)': _train_id,
    'pr.init(kind="train", id=os.environ["RUN_ID"])': _run_id_from_the_environment,
    "run.log_metrics(values)": _row_without_a_step,
}


def test_the_documented_init_id_table_is_what_the_sdk_does(tmp_path, monkeypatch):
    documented = _documented("init-id")
    assert sorted(documented) == sorted(CHECKS), "a row of the page has no check, or the reverse"
    monkeypatch.chdir(tmp_path)
    observed = {}
    for i, (call, check) in enumerate(CHECKS.items()):
        observed[call] = check(tmp_path / f"case-{i}", monkeypatch)
    assert observed == documented
    assert not re.search(r"step=None` means the step after", DOC.read_text())
