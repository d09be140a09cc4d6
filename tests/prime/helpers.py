"""
Running the real prime-runs SDK against a real openruns server: each scenario is a Python
process whose environment has only the three variables a user sets (PRIME_API_BASE_URL,
PRIME_TRACES_URL, PRIME_API_KEY, plus PATH and an empty HOME so no ~/.prime/config.json is
read), and what it logged is then read back through the native API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests import patience
from tests.online.faultproxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import json, math, prime_runs as pr
from tests.prime.verifiers_like import episode

def report(run, **extra):
    print(json.dumps({
        "id": run.id,
        "status": run.status.value,
        "url": run.url,
        "errors": run.errors,
        "failed": run.failed_records,
        "dropped": run.dropped_records,
        **extra,
    }))
"""


def run_sdk(
    script: str,
    home: Path,
    base_url: str,
    traces_url: str | None = None,
    api_key: str = "anything",
    **env: str,
) -> tuple[dict[str, Any], str]:
    """Run `script` (after a prelude with `pr`, `episode` and `report(run, **extra)`); the
    report it printed last, and its stderr. The process must exit 0."""
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "PRIME_API_BASE_URL": base_url,
        "PRIME_TRACES_URL": traces_url or base_url,
        "PRIME_API_KEY": api_key,
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
        env=environ,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def assert_clean(report: dict[str, Any], stderr: str) -> None:
    """The SDK recorded no error and lost nothing."""
    assert report["errors"] == [], report["errors"]
    assert report["failed"] == {}, report["failed"]
    assert report["dropped"] == 0
    assert "Traceback" not in stderr, stderr


def stamped(record: dict[str, Any], run_id: str, kind: str) -> dict[str, Any]:
    """`record` as Prime Traces stores it: `run.id` / `run.type` set on the envelope and on
    each member trace (a trace without a run block gets the envelope's), nothing else."""
    base = record.get("run") or {}
    out = {**record, "run": {**base, "id": run_id, "type": kind}}
    if isinstance(record.get("traces"), list):
        out["traces"] = [
            {**t, "run": {**(t.get("run") or base), "id": run_id, "type": kind}}
            for t in record["traces"]
        ]
    return out


class FaultOnce(FaultProxy):
    """A proxy that answers 502 after forwarding (the ambiguous failure) to the `nth` request
    whose target ends with `path`, and passes everything else through."""

    def __init__(self, upstream: str, path: str, nth: int = 1):
        super().__init__(upstream, rate=0.0)
        self.path = path
        self.nth = nth
        self.seen = 0

    def _draw(self, method: str = "", target: str = "") -> str | None:
        self.requests += 1
        if not target.endswith(self.path):
            return None
        self.seen += 1
        if self.seen != self.nth:
            return None
        self.faults["502_after"] = self.faults.get("502_after", 0) + 1
        return "502_after"
