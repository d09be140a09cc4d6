"""
A fault-injecting HTTP/1.1 proxy on loopback, for the reliability tests.

Each request is forwarded to the upstream server, or not, and answered, or not, according to a
fault drawn at `rate` from FAULTS: a 502 or 504 before or after the upstream saw the request
(the "after" ones are the ambiguous failures: the data is stored but the client cannot know),
a connection reset before or after forwarding, a response held past the client's read timeout,
or a response trickled out slowly. Bodies are passed through byte for byte.
"""

from __future__ import annotations

import asyncio
import random
import threading

import httpx

FAULTS = (
    "502_before",
    "502_after",
    "504_after",
    "reset_before",
    "reset_after",
    "hang_after",
    "slow_after",
)


def busy_after_one(taken: dict[str, int]):
    """A rule: the first episodes upload goes through, every later one is answered 503 (busy,
    Retry-After: 1) before the server sees it; `taken["episodes"]` counts them."""

    def rule(method: str, path: str) -> str | None:
        if path.endswith("/episodes"):
            taken["episodes"] += 1
            return None if taken["episodes"] <= 1 else "503_before"
        return None

    return rule


class FaultProxy:
    """
    `rule(method, path)` may choose the fault of a request itself (a name from FAULTS, or
    "503_before": a 503 with Retry-After: 1), before the random draw; None leaves it to the draw.
    """

    def __init__(
        self,
        upstream: str,
        rate: float,
        seed: int = 0,
        hang_seconds: float = 3.0,
        rule=None,
    ):
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.rule = rule
        self.hang_seconds = hang_seconds
        self.faults: dict[str, int] = {}
        self.requests = 0
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fault-proxy", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._loop.close()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        self._client = httpx.AsyncClient(base_url=self.upstream, timeout=60)
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopping.wait()
        # Connections still open (a stalled response, a client's idle keep-alive) are ended
        # here, while the loop runs, so none is left to a closed loop.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0)  # the transports' close callbacks
        await self._client.aclose()

    def _draw(self, method: str = "", target: str = "") -> str | None:
        """The fault for this request, or None (subclasses may choose by method and target)."""
        self.requests += 1
        fault = self.rule(method, target.split("?")[0]) if self.rule else None
        if fault is None:
            if self._rng.random() >= self.rate:
                return None
            fault = self._rng.choice(FAULTS)
        self.faults[fault] = self.faults.get(fault, 0) + 1
        return fault

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                method, target, headers, body = request
                fault = self._draw(method, target)
                if fault == "reset_before":
                    return
                if fault == "502_before":
                    await _respond(writer, 502, {}, b"bad gateway")
                    continue
                if fault == "503_before":
                    await _respond(writer, 503, {"Retry-After": "1"}, b"busy")
                    continue
                upstream = await self._client.request(
                    method, target, headers=_forwarded(headers), content=body
                )
                if fault in ("502_after", "504_after"):
                    await _respond(writer, int(fault[:3]), {}, b"gateway trouble")
                elif fault == "reset_after":
                    return
                elif fault == "hang_after":
                    await asyncio.sleep(self.hang_seconds)
                    return
                elif fault == "slow_after":
                    await _respond(
                        writer, upstream.status_code, upstream.headers, upstream.content, slow=True
                    )
                else:
                    await _respond(writer, upstream.status_code, upstream.headers, upstream.content)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    length = next((int(v) for n, v in headers if n.lower() == "content-length"), 0)
    body = await reader.readexactly(length) if length else b""
    return method, target, headers, body


def _forwarded(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    skip = {"host", "content-length", "connection", "transfer-encoding"}
    return [(n, v) for n, v in headers if n.lower() not in skip]


async def _respond(writer: asyncio.StreamWriter, status: int, headers, body: bytes, slow=False):
    skip = {"content-length", "connection", "transfer-encoding", "content-encoding"}
    lines = [f"HTTP/1.1 {status} X"]
    lines += [f"{n}: {v}" for n, v in dict(headers).items() if n.lower() not in skip]
    lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if slow:
        for i in range(0, len(body), 16):
            writer.write(body[i : i + 16])
            await writer.drain()
            await asyncio.sleep(0.01)
    else:
        writer.write(body)
    await writer.drain()
