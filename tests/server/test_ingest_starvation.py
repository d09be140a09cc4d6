"""
Ingest cannot be starved or amplified (issue 12): a declared Content-Length over the limit is
413 before the body; uploads that trickle or stall do not hold the ingest slots (a body-read
deadline, slots per caller, an idle upload losing its slot); decoding a bomb is bounded in
memory and work.

Tricklers talk raw HTTP over sockets on 127.0.0.1. With auth off, slots are counted per client
address: tricklers connect from 127.0.0.2 (all of 127/8 is loopback on Linux), the real upload
from 127.0.0.1. Waits are bounded (socket timeouts), never asserted on.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import orjson
import pytest

from .helpers import api, create_run, metric_rows, upload

TRICKLER_ADDRESS = "127.0.0.2"
WAIT = 60.0  # the most any socket waits for an answer: a loaded machine meets it


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def _open(url: str, source: str = TRICKLER_ADDRESS) -> socket.socket:
    sock = socket.create_connection(_address(url), timeout=WAIT, source_address=(source, 0))
    sock.settimeout(WAIT)
    return sock


def _headers(method: str, path: str, length: int, **extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> tuple[int | None, bytes]:
    """(status, whole answer) once the server has answered and closed; (None, b"") when it
    closed without answering. The connection must close: a socket timeout fails the test."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    if not data:
        return None, b""
    return int(data.split(b" ", 2)[1]), data


def _code(answer: bytes) -> str:
    body = answer.split(b"\r\n\r\n", 1)[1]
    return str(orjson.loads(body)["error"]["code"])


def test_a_declared_length_over_the_limit_is_413_before_any_body(make_server):
    server = make_server(max_json_bytes=4096, max_body_bytes=64 * 1024)
    with api(server.url) as http:
        rid = create_run(http)["id"]
    routes = [
        ("POST", "/api/v1/runs"),  # JSON
        ("PATCH", f"/api/v1/runs/{rid}"),
        ("POST", f"/api/v1/runs/{rid}/finish"),
        ("POST", f"/api/v1/runs/{rid}/metrics"),  # ingest
        ("POST", f"/api/v1/runs/{rid}/episodes"),
        ("POST", f"/api/v1/runs/{rid}/annotations"),
        ("POST", "/api/v1/traces"),  # the Prime wire
        ("POST", "/api/v1/evaluations/e1/samples"),
        ("PUT", "/api/v1/prime/objects/runs/1/x.parquet"),
        ("POST", "/api/v1/rft/external-runs"),
        ("POST", "/api/internal/rft/metrics"),
    ]
    for method, path in routes:
        with _open(server.url, "127.0.0.1") as sock:
            sock.sendall(_headers(method, path, 10**12, Content_Type="application/json"))
            status, answer = _answer(sock)  # no byte of the body is ever sent
        assert status == 413, (method, path, answer)
        assert _code(answer) == "body_too_large"
        assert b"connection: close" in answer.lower()


def test_tricklers_do_not_starve_a_real_upload(make_server):
    server = make_server(body_grace=5.0, body_idle_timeout=10.0)
    with api(server.url) as http:
        rid = create_run(http)["id"]
    path = f"/api/v1/runs/{rid}/metrics"
    tricklers: list[socket.socket] = []
    stop = threading.Event()

    def trickle() -> None:  # half of them send a byte now and then, half stall
        while not stop.is_set():
            for sock in tricklers[::2]:
                try:
                    sock.send(b" ")
                except OSError:
                    pass  # refused, or cut off: closed by the server
            stop.wait(0.3)

    thread = threading.Thread(target=trickle, daemon=True)
    try:
        for _ in range(40):
            sock = _open(server.url)
            tricklers.append(sock)
            sock.sendall(_headers("POST", path, 1 << 20) + b'{"step": 1')
        thread.start()
        with api(server.url) as http:  # from 127.0.0.1: another caller
            response = upload(http, rid, "metrics", metric_rows(range(10), loss=1.0))
            assert response.status_code == 200, response.text
        # Those over their caller's share (8 slots) are refused (429, the connection closed);
        # before the fix those over the server's 32 slots were (503) and the rest held every
        # slot. Every admitted one is answered 408 (too slow) and cut off. Each answer is
        # read once it comes, however long a loaded machine takes to get there (issue 24: on
        # one, the first admitted ones reached their 5 s grace before the last were refused).
        outcomes = [_answer(sock) for sock in tricklers]
        codes = sorted((status, _code(answer)) for status, answer in outcomes)
        assert codes == [(408, "body_too_slow")] * 8 + [(429, "too_many_uploads")] * 32, codes
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(5)
        for sock in tricklers:
            sock.close()


@pytest.mark.slow  # waits out idle timeouts: 11 s
def test_an_idle_upload_loses_its_slot_to_a_waiting_one(make_server):
    # Two slots, one per caller; an upload silent 2 s (idle timeout / 4) may lose its slot.
    server = make_server(
        max_ingest_requests=2, max_ingest_per_caller=1, body_idle_timeout=8.0, body_grace=60.0
    )
    with api(server.url) as http:
        rid = create_run(http)["id"]
    path = f"/api/v1/runs/{rid}/metrics"
    stalled: list[socket.socket] = []
    try:
        for source in ("127.0.0.2", "127.0.0.3"):
            sock = _open(server.url, source)
            stalled.append(sock)
            # The server asks for the body (100 Continue) once the upload holds its slot: on a
            # loaded machine the probe below could otherwise arrive first.
            sock.sendall(_headers("POST", path, 1000, Expect="100-continue"))
            assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue"), "no 100 Continue"
            sock.sendall(b"{")
        # A second upload of the first caller is refused: proof its first one holds a slot.
        with _open(server.url, "127.0.0.2") as probe:
            probe.sendall(_headers("POST", path, 1000) + b"{")
            status, answer = _answer(probe)
            assert status == 429 and _code(answer) == "too_many_uploads", answer
        time.sleep(3.0)  # both stalled uploads are now idle past 2 s (not yet at their 8 s)
        with api(server.url) as http:
            response = upload(http, rid, "metrics", metric_rows(range(5), loss=1.0))
            assert response.status_code == 200, response.text
        # The one that lost its slot is told so when it sends again, or at its idle timeout.
        outcomes = []
        for sock in stalled:
            try:
                sock.sendall(b'"step": 1}')
            except OSError:
                pass
            outcomes.append(_answer(sock))
        codes = sorted(_code(answer) for status, answer in outcomes if status is not None)
        assert "overloaded" in codes or "body_too_slow" in codes, outcomes
    finally:
        for sock in stalled:
            sock.close()


def test_a_json_body_that_stalls_gets_408_and_its_connection_closes(make_server):
    server = make_server(body_grace=1.0, body_min_rate=1024, body_idle_timeout=3.0)
    with _open(server.url, "127.0.0.1") as sock:
        sock.sendall(_headers("POST", "/api/v1/runs", 1000, Content_Type="application/json"))
        sock.sendall(b'{"kind": ')
        status, answer = _answer(sock)
    assert status == 408, answer
    assert _code(answer) == "body_too_slow"
    assert b"connection: close" in answer.lower()
