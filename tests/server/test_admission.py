"""
Ingest admission (issue 21): upload slots are shared by run, not by caller address. Many runs
of one caller each get their uploads through a full gate (they wait their turn, the run with
the fewest uploads in flight first); a run's final status is never held up by uploads; a
refusal carries a Retry-After.

The gate's own rule is driven directly on an event loop (no server: which waiter gets a freed
slot); the rest against a real server on loopback, with uploads stalled on raw sockets to keep
the slots taken (the server asks for their bodies with 100 Continue once they hold a slot).
Waits are bounded (tests/patience.py), never asserted on.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from openruns.server.admission import IngestGate
from openruns.server.errors import ApiError

from ..patience import SETTLE
from .helpers import api, create_run, error_of, metric_rows, upload

# --- the gate's rule -------------------------------------------------------------------------


def test_a_freed_slot_goes_to_the_waiting_run_with_fewest_uploads_in_flight():
    async def scenario() -> list[str]:
        gate = IngestGate(max_requests=2, max_bytes=1 << 30, per_owner=4, queue_wait=SETTLE)
        order: list[str] = []
        release = {name: asyncio.Event() for name in ("a1", "a2", "a3", "a4", "b", "c")}

        async def upload(owner: str, name: str) -> None:
            async with gate.admit(owner):
                order.append(name)
                await release[name].wait()

        tasks = [
            asyncio.create_task(upload("run a", "a1")),
            asyncio.create_task(upload("run a", "a2")),
        ]
        await asyncio.sleep(0)
        # Run a holds both slots; its next two uploads queue first, then runs b and c.
        for owner, name in (("run a", "a3"), ("run a", "a4"), ("run b", "b"), ("run c", "c")):
            tasks.append(asyncio.create_task(upload(owner, name)))
            await asyncio.sleep(0)
        assert (gate.active, gate.waiting) == (2, 4)
        for name, admitted in (("a1", 3), ("a2", 4), ("b", 5), ("c", 6)):
            release[name].set()
            while len(order) < admitted:
                await asyncio.sleep(0)
        release["a3"].set()
        release["a4"].set()
        await asyncio.gather(*tasks)
        return order

    # a1's slot goes to b (nothing in flight), a2's to c (never admitted; run a just was), then
    # run a's own waiting uploads.
    assert asyncio.run(scenario()) == ["a1", "a2", "b", "c", "a3", "a4"]


def test_an_owner_over_its_share_is_429_and_a_wait_that_runs_out_503_both_with_retry_after():
    async def scenario() -> tuple[ApiError, ApiError, int]:
        gate = IngestGate(max_requests=1, max_bytes=1 << 30, per_owner=1, queue_wait=0.01)
        async with gate.admit("run a"):
            with pytest.raises(ApiError) as over_share:
                async with gate.admit("run a"):
                    pass
            with pytest.raises(ApiError) as waited:
                async with gate.admit("run b"):
                    pass
        async with gate.admit("run b"):  # the wait that ran out left nothing behind
            pass
        return over_share.value, waited.value, gate.active

    over_share, waited, active = asyncio.run(scenario())
    assert (over_share.status_code, over_share.code) == (429, "too_many_uploads")
    assert (waited.status_code, waited.code) == (503, "overloaded")
    for error in (over_share, waited):
        assert error.headers is not None and int(error.headers["Retry-After"]) >= 1
    assert active == 0


def test_an_upload_whose_client_leaves_while_waiting_gives_its_place_back():
    async def scenario() -> tuple[int, int]:
        gate = IngestGate(max_requests=1, max_bytes=1 << 30, queue_wait=SETTLE)
        held = asyncio.Event()
        done = asyncio.Event()

        async def holder() -> None:
            async with gate.admit("run a"):
                held.set()
                await done.wait()

        async def waiter() -> None:
            async with gate.admit("run b"):
                pass

        first = asyncio.create_task(holder())
        await held.wait()
        second = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert gate.waiting == 1
        second.cancel()  # what a disconnect does to the request's task
        with pytest.raises(asyncio.CancelledError):
            await second
        waiting_after = gate.waiting
        done.set()
        await first
        return waiting_after, gate.active

    assert asyncio.run(scenario()) == (0, 0)


# --- a real server ---------------------------------------------------------------------------


def _stall(url: str, run_id: str, source: str = "127.0.0.1") -> socket.socket:
    """An upload that holds a slot (proved by its 100 Continue) and sends no body yet."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    sock = socket.create_connection(
        (parts.hostname, parts.port), timeout=SETTLE, source_address=(source, 0)
    )
    head = (
        f"POST /api/v1/runs/{run_id}/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-ndjson\r\nContent-Length: 1000\r\n"
        "Expect: 100-continue\r\n\r\n"
    )
    try:
        sock.sendall(head.encode())
        answer = sock.recv(64)
        assert answer.startswith(b"HTTP/1.1 100 Continue"), f"the stalled upload got {answer!r}"
    except BaseException:
        sock.close()  # an unclosed socket's ResourceWarning would fail a later test
        raise
    return sock


def _gate(server):
    return server.server.config.app.state.server.gate


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + SETTLE
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _upload_until_stored(url: str, run_id: str, data: bytes, statuses: list[int]) -> None:
    """Upload as the SDK does: again after a 429/503's Retry-After, a bounded number of times."""
    with api(url) as http:
        http.timeout = httpx.Timeout(SETTLE)
        for _ in range(20):
            response = upload(http, run_id, "metrics", data)
            statuses.append(response.status_code)
            if response.status_code == 200:
                return
            assert response.status_code in (429, 503), response.text
            time.sleep(float(response.headers["Retry-After"]))
    raise AssertionError(f"run {run_id}'s upload never got through: {statuses}")


def test_many_runs_of_one_caller_all_get_through_a_full_gate_and_a_finish_is_not_held(
    make_server,
):
    # Two slots; auth off, so every upload below comes from one caller (127.0.0.1).
    server = make_server(max_ingest_requests=2, body_grace=SETTLE, body_idle_timeout=SETTLE)
    with api(server.url) as http:
        blocker = create_run(http)["id"]
        runs = [create_run(http)["id"] for _ in range(6)]  # three times the slots
        finisher = create_run(http)["id"]
    stalled = [_stall(server.url, blocker) for _ in range(2)]
    statuses: dict[str, list[int]] = {run: [] for run in runs}
    threads = [
        threading.Thread(
            target=_upload_until_stored,
            args=(
                server.url,
                run,
                metric_rows(range(i * 10, i * 10 + 10), loss=0.5),
                statuses[run],
            ),
        )
        for run in runs
        for i in range(3)
    ]
    try:
        for thread in threads:
            thread.start()
        _until(lambda: _gate(server).waiting >= 1, "an upload waits for a slot")
        # Every slot is taken and uploads wait: a run's final status still gets through.
        with api(server.url) as http:
            response = http.post(f"/runs/{finisher}/finish", json={"status": "completed"})
            assert response.status_code == 200, response.text
            assert http.get(f"/runs/{finisher}").json()["status"] == "completed"
        for sock in stalled:  # the stalled uploads end: their slots go to the waiting runs
            sock.sendall(b"\n" * 1000)
    finally:
        for thread in threads:
            thread.join(SETTLE)
        for sock in stalled:
            sock.close()
    assert not any(thread.is_alive() for thread in threads)
    with api(server.url) as http:
        for run in runs:
            series = http.get(f"/runs/{run}/metrics", params={"keys": "loss", "max_points": 0})
            assert series.json()["series"]["loss"]["step"] == list(range(30)), run
    # Six runs of one address were never refused as one caller (429): they waited their turn.
    assert 429 not in {status for run in runs for status in statuses[run]}, statuses


def test_the_share_is_per_run_and_its_429_carries_retry_after(make_server):
    server = make_server(max_ingest_per_caller=1, body_grace=SETTLE, body_idle_timeout=SETTLE)
    with api(server.url) as http:
        busy, other = create_run(http)["id"], create_run(http)["id"]
    stalled = _stall(server.url, busy)
    try:
        with api(server.url) as http:
            refused = upload(http, busy, "metrics", metric_rows(range(3), loss=1.0))
            assert error_of(refused)[:2] == (429, "too_many_uploads")
            assert int(refused.headers["Retry-After"]) >= 1
            # The same caller's upload to another run has its own share.
            response = upload(http, other, "metrics", metric_rows(range(3), loss=1.0))
            assert response.status_code == 200, response.text
    finally:
        stalled.close()
