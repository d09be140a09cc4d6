"""
A fake of openruns.wire.WireClient for the upload path's unit tier: the server is a dict
in memory, and each call can be made to fail, hang or answer late, in a scripted order.

    wire = FakeWire()
    wire.fail_next("upload", TransportError("connection refused"), times=3)
    sink = ServerSink(wire, "run", spool, stats, memory_bytes=..., give_up_after=...)
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from openruns.batches import batch_lines, parse_header


class FakeWire:
    base_url = "http://fake"
    connect_timeout = 1.0
    request_timeout = 1.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []  # (method, the key or run id), in call order
        self.stored: dict[str, list[dict[str, Any]]] = defaultdict(list)  # stream -> headers
        self.receipts: dict[tuple[str, str], dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self._failures: dict[str, list[BaseException | Callable[[], Any]]] = defaultdict(list)
        self._bad_lines: list[tuple[Callable[[bytes], bool], BaseException]] = []
        self.in_flight = 0  # uploads being answered now
        self.most_in_flight: dict[str, int] = defaultdict(int)  # stream -> the most at once

    def fail_next(
        self, method: str, error: BaseException | Callable[[], Any], times: int = 1
    ) -> None:
        """The next `times` calls of `method` raise `error` (or run it, when it is callable:
        to block on an event, or raise after the call took effect)."""
        with self.lock:
            self._failures[method] += [error] * times

    def reject_lines(self, bad: Callable[[bytes], bool], error: BaseException) -> None:
        """Every upload holding a line for which `bad` is true raises `error`, storing
        nothing, as a server refuses a body with a bad line (whatever else the body holds)."""
        with self.lock:
            self._bad_lines.append((bad, error))

    def _call(self, method: str, what: Any) -> Callable[[], Any] | None:
        with self.lock:
            self.calls.append((method, what))
            script = self._failures[method]
            failure = script.pop(0) if script else None
        if isinstance(failure, BaseException):
            raise failure
        return failure

    # -- the WireClient methods the SDK uses ---------------------------------------------------

    def upload(self, run_id: str, stream: str, parts: Sequence[bytes], *, key: str, timeout=None):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight[stream] = max(self.most_in_flight[stream], self.in_flight)
        try:
            return self._upload(stream, parts, key)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _upload(self, stream: str, parts: Sequence[bytes], key: str) -> dict[str, Any]:
        after = self._call("upload", key)
        body = b"".join(parts)
        header, length = parse_header(body)
        assert header["key"] == key and header["stream"] == stream
        lines = batch_lines(body, length).splitlines()
        for bad, error in self._bad_lines:
            if any(bad(line) for line in lines):
                raise error
        with self.lock:
            receipt = self.receipts.get((stream, key))
            if receipt is None:  # idempotent, like the server: a replay stores nothing
                header["lines"] = lines
                self.stored[stream].append(header)
                receipt = {"status": "committed", "records": header["records"], "receipt": key}
                self.receipts[(stream, key)] = receipt
        if after is not None:
            after()  # e.g. raise: stored, but the answer is lost
        return receipt

    def health(self, *, timeout=None):
        self._call("health", None)
        return {"status": "ok", "encodings": ["zstd"], "heartbeat_timeout": 40.0}

    def create_run(self, body, *, key):
        self._call("create_run", key)
        with self.lock:
            run = self.runs.setdefault(body["id"], {**body, "status": "running"})
        return {**run, "token": "orr_fake", "url": f"/runs/{body['id']}"}

    def finish_run(self, run_id, body, *, timeout=None):
        self._call("finish_run", run_id)
        with self.lock:
            self.runs[run_id].update(body)
        return self.runs[run_id]

    def patch_run(self, run_id, changes, *, timeout=None):
        self._call("patch_run", run_id)
        return self.runs.get(run_id, {})

    def heartbeat(self, run_id, *, timeout=None):
        self._call("heartbeat", run_id)
        return {"status": "running"}

    def drop(self) -> None:
        pass

    def close(self) -> None:
        pass

    # -- what the tests read ------------------------------------------------------------------

    def records(self, stream: str) -> list[bytes]:
        """Every line stored for a stream, in the order the batches were stored."""
        with self.lock:
            return [line for header in self.stored[stream] for line in header["lines"]]
