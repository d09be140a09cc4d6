"""Helpers of the server tests: a client bound to a real server, and upload bodies."""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import zstandard

from openruns.rundir import batch_key

from .. import patience

SRC = str(Path(__file__).resolve().parents[2] / "src")


def api(url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url + "/api/v1", headers=headers, timeout=30)


def metric_rows(steps: Iterable[int], **values: Any) -> bytes:
    """NDJSON metric rows, as the SDK's encoder writes them; value callables get the step."""
    out = []
    for step in steps:
        row = {k: (v(step) if callable(v) else v) for k, v in values.items()}
        out.append(orjson.dumps({"step": step, "ts": 1.0e9 + step, "values": row}) + b"\n")
    return b"".join(out)


def ndjson(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def episode(i: int, step: int, reward: float | None, **extra: Any) -> dict[str, Any]:
    trace: dict[str, Any] = {"reward": reward, "num_total_tokens": 10 + i}
    return {
        "id": f"ep-{step}-{i}",
        "run": {"work": {"step": step}},
        "env": extra.pop("env", "math"),
        "traces": [trace],
        **extra,
    }


def encode(data: bytes, encoding: str) -> bytes:
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(data)
    if encoding == "gzip":
        return gzip.compress(data, compresslevel=1)
    return data


def upload(
    client: httpx.Client,
    run_id: str,
    kind: str,
    data: bytes,
    encoding: str = "zstd",
    key: str | None = "auto",
    stream: str | None = None,
) -> httpx.Response:
    """POST metrics or episodes like the SDK does (key "auto": sha256 of the body)."""
    headers = {"Content-Encoding": encoding, "Content-Type": "application/x-ndjson"}
    if key == "auto":
        key = batch_key(data)
    if key is not None:
        headers["Idempotency-Key"] = key
    if stream is not None:
        headers["X-Openruns-Stream"] = stream
    return client.post(f"/runs/{run_id}/{kind}", content=encode(data, encoding), headers=headers)


def create_run(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = client.post("/runs", json={"kind": "train", **fields})
    assert response.status_code in (200, 201), response.text
    return response.json()


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    return response.status_code, body["error"]["code"], body["error"]["message"]


@contextlib.contextmanager
def server_process(tmp_path_factory: Any, name: str, *extra: str) -> Iterator[ServerProcess]:
    """An auth-off `openruns server` on a fresh data directory, stopped after (the module or
    session fixtures of tests/prime and tests/wandb)."""
    proc = ServerProcess(tmp_path_factory.mktemp(name) / "data", *extra).start()
    try:
        yield proc
    finally:
        proc.stop()


class ServerProcess:
    """`openruns server` as a child process, to be SIGKILLed and restarted on the same data.
    `where` is a data directory, or the flags of other stores (tests/services.Stores.cli_args).
    Its output goes to a log file (a pipe nobody reads could fill up and stall it)."""

    def __init__(self, where: Path | list[str], *extra: str, log: Path | None = None):
        self.data_dir = where if isinstance(where, Path) else None
        self.store_args = ["--data-dir", str(where)] if isinstance(where, Path) else where
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        if log is None:
            assert isinstance(where, Path), "a ServerProcess without a data directory needs log="
            log = where.parent / f"{where.name}-server.log"
        self.log = log

    def start(self, port: int = 0) -> ServerProcess:
        args = [sys.executable, "-m", "openruns.cli", "server", "--port", str(port)]
        args += [*self.store_args, *self.extra]
        env = {**os.environ, "PYTHONPATH": SRC}
        with self.log.open("ab") as log:
            offset = log.tell()
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + patience.START  # imports take a minute at load 20
        while time.monotonic() < deadline:
            output = self.log.read_bytes()[offset:].decode(errors="replace")
            match = re.search(r"openruns server listening on (http://\S+)", output)
            if match:
                self.url = match.group(1)
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"openruns server did not start: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def new_key(stores: Any, team: str, capsys: Any) -> str:
    """A fresh API key of `team`, made by `openruns keys create` on `stores`' database."""
    from openruns.cli import main as openruns_main

    assert openruns_main(["keys", "create", "--team", team, *stores.db_args()]) == 0
    out, err = capsys.readouterr()
    assert "not shown again" in err
    return out.strip()


@contextlib.contextmanager
def database_at(
    revision: str, backend: str, stores_factory: Any, tmp_path: Path
) -> Iterator[tuple[str, Any]]:
    """A new database of `backend` migrated only up to `revision` (a schema of before), and a
    connection to it in one transaction, to write rows as a server of then did: yields (url,
    connection). `Store.open(url)` afterwards migrates it to the newest schema."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from openruns.server.store.migrate import SCRIPTS

    if backend == "postgres":
        url = stores_factory.postgres().new_database(migrated=False)
        url = url.replace("postgresql://", "postgresql+psycopg://")
    else:
        url = f"sqlite:///{tmp_path}/openruns.db"
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            yield url, conn
    finally:
        engine.dispose()
