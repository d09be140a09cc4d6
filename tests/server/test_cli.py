"""`openruns server` as a command: the startup line, one-line errors, a cheap import."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from openruns.cli import main as openruns_main
from openruns.server.config import DEFAULT_PORT, default_data_dir

from .. import patience
from ..services import free_port
from .helpers import SRC, ServerProcess


def openruns(*args: str, timeout: float = patience.EXIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openruns.cli", *args],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_server_prints_its_url_serves_and_stops_on_sigterm(tmp_path):
    server = ServerProcess(tmp_path / "data").start(port=0)
    try:
        health = httpx.get(server.url + "/api/v1/health", timeout=10).json()
        assert health["status"] == "ok" and "zstd" in health["encodings"]
        assert (tmp_path / "data" / "openruns.db").exists()
        assert "auth off" in server.output()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert server.proc.wait(15) in (0, -signal.SIGTERM)
    finally:
        server.stop()


def test_startup_errors_are_one_line(tmp_path):
    unsafe = openruns("server", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "d"))
    assert unsafe.returncode == 2
    assert unsafe.stderr.count("\n") == 1 and "Traceback" not in unsafe.stderr
    assert "--auth" in unsafe.stderr and "--insecure" in unsafe.stderr
    assert not (tmp_path / "d").exists()

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        in_use = openruns("server", "--port", port, "--data-dir", str(tmp_path / "d"))
    assert in_use.returncode == 2 and in_use.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in in_use.stderr

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    bad_dir = openruns("server", "--port", "0", "--data-dir", str(not_a_dir))
    assert bad_dir.returncode == 2 and bad_dir.stderr.count("\n") == 1
    assert "cannot open the data directory" in bad_dir.stderr


def test_unreachable_or_misconfigured_stores_are_one_line_errors(stores_factory, tmp_path, capsys):
    """The database or the bucket: which one, and why, in one line (no password shown). In
    this process: the command's own code path, without a Python start per case."""
    s3 = stores_factory.s3()
    port = free_port()  # nothing listens there
    cases = [
        (
            ["--db", f"postgresql://openruns:s3cret@127.0.0.1:{port}/runs"],
            f"cannot open the database postgresql://openruns:***@127.0.0.1:{port}/runs",
        ),
        (["--db", "mysql://h/db"], "unsupported database 'mysql'"),
        (
            ["--blobs", "s3://no-such-bucket/x", "--s3-endpoint-url", s3.url],
            "the bucket of s3://no-such-bucket/x at " + s3.url + " does not exist",
        ),
        (
            ["--blobs", "s3://b", "--s3-endpoint-url", f"http://127.0.0.1:{port}"],
            "cannot reach s3://b at",
        ),
        (["--blobs", "gs://b"], "unsupported blob store 'gs://b'"),
    ]
    for flags, expected in cases:
        code = openruns_main(["server", "--port", "0", "--data-dir", str(tmp_path / "d"), *flags])
        out, err = capsys.readouterr()
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("openruns server: "), err
        assert expected in err, err
        assert "s3cret" not in err and not out


def test_building_the_command_line_does_not_import_the_server_stack():
    code = (
        "import sys\n"
        "from openruns.cli import main\n"
        "try:\n"
        "    main(['server', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('fastapi', 'sqlalchemy', 'uvicorn', 'alembic') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert "HEAVY []" in done.stdout, done.stdout + done.stderr
    assert "OPENRUNS_<NAME>" in done.stdout and f"(default: {DEFAULT_PORT})" in done.stdout


def test_default_data_dir():
    assert default_data_dir({"OPENRUNS_DATA_DIR": "/srv/x"}) == Path("/srv/x")
    assert default_data_dir({"XDG_DATA_HOME": "/xdg"}) == Path("/xdg/openruns")
    assert default_data_dir({}) == Path.home() / ".local" / "share" / "openruns"
