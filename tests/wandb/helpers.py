"""
Running the real wandb SDK (0.31.0) against a real `openruns server`: each script in its own
subprocess whose environment holds only what a user sets (WANDB_BASE_URL, WANDB_API_KEY) and
what keeps the SDK on this machine and quiet (a temporary HOME and WANDB_DIR, WANDB_SILENT,
no git or code saving). The SDK then talks to nothing but the server: its telemetry goes to
the base URL too (server/wandb/telemetry.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

from .. import patience
from ..procs import default_signals

ROOT = Path(__file__).resolve().parents[2]
ANY_KEY = "0" * 40  # any key on loopback without auth: the SDK wants 40 characters
SCRIPT_TIMEOUT = patience.EXIT


def wandb_env(tmp_path: Path, base_url: str | None, api_key: str = ANY_KEY, **extra: str) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "WANDB_DIR": str(tmp_path),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        **extra,
    }
    if base_url is not None:
        env["WANDB_BASE_URL"] = base_url
        env["WANDB_API_KEY"] = api_key
    return env


def write_script(tmp_path: Path, code: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def run_script(
    tmp_path: Path,
    code: str,
    base_url: str | None,
    *args: str,
    api_key: str = ANY_KEY,
    check: bool = True,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    """Run `code` with the SDK pointed at `base_url` (None: no server, for offline runs);
    with `check`, its exit code must be 0 (the output is in the failure message)."""
    script = write_script(tmp_path, code, f"script-{time.monotonic_ns()}.py")
    done = subprocess.run(
        [sys.executable, str(script), *args],
        preexec_fn=default_signals,
        env=wandb_env(tmp_path, base_url, api_key, **extra),
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        cwd=tmp_path,
    )
    if check:
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def start_script(
    tmp_path: Path, code: str, base_url: str, *args: str, **extra: str
) -> subprocess.Popen[str]:
    """Start `code` (it prints `ready` once its run is open); the caller waits for it. Its
    output goes to a file, not a pipe nobody reads while the test waits (a script that prints
    more than a pipe holds would block in write()). It starts with SIGINT at its default, as
    every script here does (procs.default_signals): a stop from the dashboard reaches a W&B
    script as a simulated SIGINT, which does nothing where the runner inherited it ignored."""
    script = write_script(tmp_path, code, f"script-{time.monotonic_ns()}.py")
    with open(script.with_suffix(".out"), "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", str(script), *args],
            preexec_fn=default_signals,
            env=wandb_env(tmp_path, base_url, **extra),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
    proc.output_path = script.with_suffix(".out")  # type: ignore[attr-defined]
    return proc


def output_of(proc: subprocess.Popen[str]) -> str:
    """What the script started by start_script has printed so far."""
    return proc.output_path.read_text(errors="replace")  # type: ignore[attr-defined]


def end(proc: subprocess.Popen[str]) -> str:
    """Kill the script if it still runs, and read its output."""
    proc.kill()
    proc.communicate(timeout=SCRIPT_TIMEOUT)
    return output_of(proc)


def wait_exit(proc: subprocess.Popen[str], tmp_path: Path) -> int:
    """The script's exit code; if it runs past SCRIPT_TIMEOUT, a failure with its output and
    the end of its SDK's own log (what wandb-core sent and was answered)."""
    try:
        return proc.wait(SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        logs = sorted(tmp_path.glob("wandb/run-*/logs/debug-internal.log"))
        tail = "\n".join(logs[-1].read_text().splitlines()[-40:]) if logs else "(no SDK log)"
        raise AssertionError(
            f"the script still ran after {SCRIPT_TIMEOUT} s\n{output_of(proc)[-4000:]}\n{tail}"
        ) from None


def wait_ready(proc: subprocess.Popen[str], timeout: float = SCRIPT_TIMEOUT) -> None:
    """Wait until the script says `ready` (it failed if it exits first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "ready" in (line.strip() for line in output_of(proc).splitlines()):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"the script never said ready: {output_of(proc)}")


def api(server, path: str):
    """GET a native API route of `server` (auth off) and its JSON."""
    answer = httpx.get(f"{server.url}/api/v1{path}", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def poll(read, until, timeout: float = patience.SETTLE, what: str = "the condition"):
    """read() until until(value), for a state the server reaches by itself (a sweep)."""
    deadline = time.monotonic() + timeout
    value = read()
    while not until(value):
        assert time.monotonic() < deadline, f"{what} never held; last seen: {value!r}"
        time.sleep(0.2)
        value = read()
    return value


def run_file(script: Path, tmp_path: Path, base_url: str, **extra: str) -> dict:
    """Run the script file `script` as a user would (wandb_env; OUT: a directory for it) and
    return the JSON report it printed last; it must exit 0 within three minutes (a framework's
    imports and calls take longer than a scenario's)."""
    done = subprocess.run(
        [sys.executable, str(script)],
        preexec_fn=default_signals,
        env=wandb_env(tmp_path, base_url, HF_HUB_OFFLINE="1", OUT=str(tmp_path / "out"), **extra),
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# A run that logs until it is stopped (a signal, a stop request); it says `ready` once open. It
# ends by itself only after 10 minutes, longer than the tests wait (3000 steps of 20 ms ended it
# after a minute: a stop that never came then read as a completed run, not as the stop missed).
LOOP = """
import sys, time, wandb
run = wandb.init(project=sys.argv[2] if len(sys.argv) > 2 else "loops", id=sys.argv[1])
run.log({"loss": 1.0})
print("ready", flush=True)
end = time.monotonic() + 600
i = 0
while time.monotonic() < end:
    run.log({"i": i})
    i += 1
    time.sleep(0.02)
run.finish()
"""
