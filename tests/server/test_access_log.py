"""
The access log (issue 25): one line per request with its method, path without the query
string, status, milliseconds and response bytes, on by default; sampled or off by a setting.
"""

from __future__ import annotations

import logging
import re
import time

import httpx

from openruns.server.access_log import ACCESS_LOGGER

from .. import patience
from .helpers import ServerProcess, api, create_run

LINE = re.compile(r"method=(\S+) path=(\S+) status=(\d+) ms=([\d.]+) bytes=(\d+)")


def _access(caplog) -> list[dict]:
    return [r.access for r in caplog.records if r.name == ACCESS_LOGGER]


def test_every_request_is_one_line_without_its_query_string(make_server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    server = make_server()
    with api(server.url) as http:
        rid = create_run(http)["id"]
        listed = http.get("/runs", params={"token": "s3cret", "limit": 5})
        missing = http.get("/runs/no-such-run")
    deadline = time.monotonic() + patience.SETTLE  # a line is written once its answer is sent
    while len(_access(caplog)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    entries = _access(caplog)
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("POST", "/api/v1/runs", 201),
        ("GET", "/api/v1/runs", 200),
        ("GET", "/api/v1/runs/no-such-run", 404),
    ]
    assert entries[1]["bytes"] == len(listed.content) and entries[2]["bytes"] == len(
        missing.content
    )
    assert all(e["ms"] >= 0 for e in entries)
    text = caplog.text
    assert "s3cret" not in text and "token=" not in text
    assert LINE.search(text), text
    assert rid  # the run made by the first request


def test_the_log_is_sampled_or_off_by_a_setting(make_server, caplog):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    off = make_server(access_log=0.0)
    sampled = make_server(access_log=1e-12)  # practically no successful answer is logged
    for server in (off, sampled):
        with api(server.url) as http:
            for _ in range(5):
                assert http.get("/runs").status_code == 200
            assert http.get("/runs/no-such-run").status_code == 404
    deadline = time.monotonic() + patience.SETTLE
    while not _access(caplog) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Errors are always logged when the log is on; nothing at all when it is off.
    assert [(e["path"], e["status"]) for e in _access(caplog)] == [
        ("/api/v1/runs/no-such-run", 404)
    ]


def test_openruns_server_prints_the_lines_on_stderr(tmp_path):
    server = ServerProcess(tmp_path / "data").start()
    try:
        assert httpx.get(server.url + "/api/v1/health?x=1", timeout=30).status_code == 200
        deadline = time.monotonic() + patience.SETTLE
        while "path=/api/v1/health " not in server.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = [m.groups() for m in LINE.finditer(server.output())]
        assert ("GET", "/api/v1/health", "200") in [line[:3] for line in lines], server.output()
    finally:
        server.stop()
