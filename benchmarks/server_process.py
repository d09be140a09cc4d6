"""`openruns server` as a child process of a benchmark: on a free port, its output in a log file
(a pipe nobody drains would stall a server that logs), its URL read from that log; optionally
without its search indexer, which reads every record behind ingest (issue 14), to measure
ingest's own cost; optionally of other code (`src`: e.g. `git archive <commit> src | tar -x -C
/tmp/before`, then `/tmp/before/src`), to measure a change against the tree before it.
PYTHONPATH alone would not do: the server's is set here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

_WITHOUT_INDEXER = """
import asyncio, sys
from openruns.server import search_indexer
async def idle(state):
    await asyncio.Event().wait()
search_indexer.follow = idle
from openruns.cli import main
sys.exit(main(sys.argv[1:]))
"""


def start_server(
    args: list[str], log: Path, *, search_index: bool = True, src: str = SRC
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `openruns server --port 0 ARGS` of the code in `src` (no bytecode written there
    unless it is this checkout's); (the process, its URL) once it listens."""
    launcher = ["-m", "openruns.cli"] if search_index else ["-c", _WITHOUT_INDEXER]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *launcher, "server", "--port", "0", *args],
            env={**os.environ, "PYTHONPATH": src}
            | ({} if src == SRC else {"PYTHONDONTWRITEBYTECODE": "1"}),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if match := re.search(rb"listening on (http://\S+)", log.read_bytes()):
            return proc, match.group(1).decode()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"openruns server did not start:\n{log.read_text(errors='replace')}")
