"""Metrics uploads parsed by worker processes (server/parse_workers.py): what a worker parses is
stored exactly as what the server parses itself, a bad line is refused the same way, and a
worker's end (killed, or its server killed) loses nothing and leaves no process behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import psutil

from openruns.rundir import batch_key
from openruns.server.parse_workers import MAX_LOOSE_POINTS, MIN_BODY_BYTES, ParseWorkers
from openruns.server.plain_rows import plain_batches

from .. import patience
from .helpers import ServerProcess, api, create_run, encode, error_of, upload


def _rows(steps: int, plain: bool = False) -> bytes:
    """Dense rows of 12 keys (columns), a step written twice (the later row wins), rows of
    other names between them (loose points) and rows keyed by time. Their values vary as a
    training loop's do (equal ones compress 26x), so at 800 rows and more the zstd body is a
    worker's size (MIN_BODY_BYTES as sent). `plain`: the step written twice has every key,
    and no row has other names."""
    out = []
    names = [f"train/metric_{k}" for k in range(12)]
    for step in range(steps):
        values = {
            n: step / 7 if k == 0 else (step * 2654435761 + k * 40503) % 2**32 / 2**32
            for k, n in enumerate(names)
        }
        out.append({"step": step, "ts": 1.0e9 + step, "values": values})
        if step % 500 == 499 and plain:
            out.append({"step": step - 10, "values": {n: -1.0 for n in names}})
        elif step % 500 == 499:
            out.append({"step": step - 10, "values": {names[0]: -1.0, "rare": 1}})
            out.append({"step": None, "ts": 2.0e9 + step, "values": {"lag": float(step)}})
    data = b"".join(orjson.dumps(row) + b"\n" for row in out)
    assert len(encode(data, "zstd")) >= MIN_BODY_BYTES, "too small to go to a worker"
    return data


def _stored(http, rid: str) -> dict:
    keys = http.get(f"/runs/{rid}/metrics/keys").json()
    full = http.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()
    coarse = http.get(f"/runs/{rid}/metrics", params={"max_points": 30}).json()
    return {"keys": keys, "full": full, "coarse": coarse}


def _parsers(handle) -> ParseWorkers:
    return handle.server.config.app.state.server.parsers


def _gone(pids: list[int]) -> bool:
    """Whether none of `pids` runs (a zombie has exited; its parent reaps it when it can)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def _warm(handle, http) -> list[int]:
    """Start the server's parse workers (an upload of their size, parsed in the server while
    they start), wait until they are up; the sizes of the uploads they parse from then on."""
    parsers = _parsers(handle)
    rid = create_run(http)["id"]
    assert upload(http, rid, "metrics", _rows(800)).status_code == 200
    _until(parsers.ready, "the parse workers did not start")
    parsed: list[int] = []
    parse = parsers.parse

    async def counted(body: bytes, encoding: str | None, limits):
        parsed.append(len(body))
        return await parse(body, encoding, limits)

    parsers.parse = counted
    return parsed


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + patience.SETTLE
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_worker_stores_what_the_server_parses_itself(make_server):
    """Both ways a worker parses: rows of every kind (metric_rows) and plainly dense rows
    (plain_rows, Arrow), each stored as the server stores what it parses itself."""
    mixed, plain = _rows(3000), _rows(3000, plain=True)
    assert plain_batches(plain, 10**6) is not None and plain_batches(mixed, 10**6) is None
    stored = []
    for workers in (1, 0):
        server = make_server(parse_workers=workers)
        with api(server.url) as http:
            parsed = _warm(server, http) if workers else []
            pids = _parsers(server).pids()
            assert len(pids) == workers
            for name, data, rows in (("mixed", mixed, 3000 + 2 * 6), ("plain", plain, 3006)):
                rid = create_run(http, id=f"run-{name}")["id"]
                receipt = upload(http, rid, "metrics", data)
                assert receipt.status_code == 200, receipt.text
                assert receipt.json()["rows"] == rows
                stored.append(_stored(http, rid))
                # A replay answers the first receipt and writes nothing. It goes to a worker
                # too: the receipt is found in the write's transaction.
                assert upload(http, rid, "metrics", data).json() == receipt.json()
                # Its key with another body is refused, and changes nothing.
                reused = upload(http, rid, "metrics", _rows(900), key=batch_key(data))
                assert error_of(reused)[:2] == (422, "idempotency_key_reused")
            assert len(parsed) == 6 * workers, "the uploads did not go to a worker"
        server.stop()
        _until(lambda pids=pids: _gone(pids), "the worker outlived its server")
    assert stored[0] == stored[2] and stored[1] == stored[3]
    first = stored[0]["full"]["series"]["train/metric_0"]
    assert first["value"][489] == -1.0 and first["value"][490] == 490 / 7
    counts = {k["key"]: k["count"] for k in stored[0]["keys"]}
    assert counts["lag"] == 6 and counts["rare"] == 6 and counts["train/metric_0"] == 3000
    first = stored[1]["full"]["series"]["train/metric_0"]
    assert first["value"][489] == -1.0 and first["value"][490] == 490 / 7
    assert {k["key"]: k["count"] for k in stored[1]["keys"]}["train/metric_11"] == 3000


def test_a_bad_line_in_a_worker_parsed_upload_stores_nothing(make_server):
    server = make_server(parse_workers=1)
    with api(server.url) as http:
        parsed = _warm(server, http)
        rid = create_run(http)["id"]
        good = _rows(2000)
        lines = good.split(b"\n")
        lines[1500] = b'{"step": 1500, "values": {"loss": "high"}}'
        status, code, message = error_of(upload(http, rid, "metrics", b"\n".join(lines)))
        assert (status, code) == (400, "invalid_metrics") and message.startswith("line 1501:")
        assert parsed, "the upload did not go to a worker"
        assert http.get(f"/runs/{rid}/metrics/keys").json() == []
        assert upload(http, rid, "metrics", good).status_code == 200


def test_loose_points_past_a_workers_bound_are_parsed_by_the_server(make_server):
    """Rows that never share their names come back as points, which cost memory: past
    MAX_LOOSE_POINTS the worker gives them up and the server streams the upload itself."""
    rows = MAX_LOOSE_POINTS + 1000
    data = b"".join(
        b'{"step": %d, "values": {"k%d": %d}}\n' % (step, step % 2, step) for step in range(rows)
    )
    server = make_server(parse_workers=1)
    with api(server.url) as http:
        parsed = _warm(server, http)
        rid = create_run(http)["id"]
        receipt = upload(http, rid, "metrics", data)
        assert receipt.status_code == 200, receipt.text
        assert parsed, "the upload did not go to a worker"
        keys = {k["key"]: k["count"] for k in http.get(f"/runs/{rid}/metrics/keys").json()}
        assert keys == {"k0": rows // 2, "k1": rows // 2}
        odd = http.get(f"/runs/{rid}/metrics", params={"keys": "k1", "max_points": 0}).json()
        assert odd["series"]["k1"]["step"][-1] == rows - 1


def test_a_killed_worker_costs_only_its_trip(make_server):
    server = make_server(parse_workers=1)
    with api(server.url) as http:
        parsed = _warm(server, http)
        (worker,) = _parsers(server).pids()
        os.kill(worker, signal.SIGKILL)
        _until(lambda: _gone([worker]), "the killed worker did not exit")
        rid = create_run(http)["id"]
        # Sent to the dead worker, then parsed here; the next starts a new pool.
        assert upload(http, rid, "metrics", _rows(1001)).status_code == 200
        assert len(parsed) == 1
        assert upload(http, rid, "metrics", _rows(1002)).status_code == 200
        (new,) = _parsers(server).pids()
        assert new != worker, "no new worker was started"
        keys = {k["key"]: k["count"] for k in http.get(f"/runs/{rid}/metrics/keys").json()}
        assert keys["train/metric_5"] == 1002


def test_a_killed_server_leaves_no_worker(tmp_path: Path):
    server = ServerProcess(tmp_path / "data", "--parse-workers", "1").start()
    try:
        with api(server.url) as http:
            rid = create_run(http)["id"]
            assert upload(http, rid, "metrics", _rows(1000)).status_code == 200
        assert server.proc is not None
        children = psutil.Process(server.proc.pid).children(recursive=True)
        assert children, "the upload did not go to a worker"
        server.kill()
        _, alive = psutil.wait_procs(children, timeout=patience.EXIT)
        assert not alive, f"left behind: {[p.cmdline() for p in alive]}"
    finally:
        server.stop()
