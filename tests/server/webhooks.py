"""A real webhook receiver on loopback for the alert tests: records every request, answers
500 to the first `fail_first` of them and 410 to any path but /hook, and checks signatures the
way docs/server.md tells a receiver to."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from .. import patience


class Receiver:
    def __init__(self, fail_first: int = 0):
        self.requests: list[dict[str, Any]] = []
        self.fail_first = fail_first
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    failing = len(receiver.requests) <= receiver.fail_first
                gone = self.path != "/hook"
                self.send_response(410 if gone else 500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests)

    def accepted(self) -> list[dict[str, Any]]:
        """The requests answered 200, their bodies parsed, oldest first."""
        return [
            {**r, "json": orjson.loads(r["body"])}
            for r in self.received()[self.fail_first :]
            if r["path"] == "/hook"
        ]

    def wait(self, count: int, where: Callable[[dict[str, Any]], bool] = lambda r: True) -> list:
        """The accepted requests matching `where`, once there are at least `count` of them."""
        deadline = time.monotonic() + patience.SETTLE
        while True:
            found = [r for r in self.accepted() if where(r)]
            if len(found) >= count:
                return found
            assert time.monotonic() < deadline, f"{len(found)} of {count} webhooks: {found}"
            time.sleep(0.05)


def signature_ok(request: dict[str, Any], secret: str) -> bool:
    """A receiver's check: HMAC-SHA256 over "<timestamp>.<raw body>", compared in constant
    time, and a recent timestamp."""
    headers = {k.lower(): v for k, v in request["headers"].items()}
    timestamp = headers["x-openruns-timestamp"]
    expected = hmac.new(
        secret.encode(), timestamp.encode() + b"." + request["body"], hashlib.sha256
    ).hexdigest()
    fresh = abs(time.time() - int(timestamp)) < 300
    return fresh and hmac.compare_digest(headers["x-openruns-signature"], "v1=" + expected)
