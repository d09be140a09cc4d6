"""Limits: body and decompressed sizes (413), encodings (415), finished runs (409), overload
(503)."""

from __future__ import annotations

import threading
import time

import httpx
import zstandard

from .. import patience
from .helpers import api, create_run, error_of, metric_rows, ndjson, upload

KiB = 1024


def test_size_limits_and_encodings(make_server):
    server = make_server(
        max_body_bytes=64 * KiB, max_decompressed_bytes=256 * KiB, max_json_bytes=4 * KiB
    )
    with api(server.url) as http:
        rid = create_run(http)["id"]
        raw = metric_rows(range(5000), a=1.0, b=2.0)  # ~300 KiB, compresses well
        assert len(raw) > 256 * KiB
        status, code, _ = error_of(upload(http, rid, "metrics", raw, encoding="identity"))
        assert (status, code) == (413, "body_too_large")
        for encoding in ("zstd", "gzip"):
            status, code, _ = error_of(upload(http, rid, "metrics", raw, encoding=encoding))
            assert (status, code) == (413, "decompressed_body_too_large")
        bomb = zstandard.ZstdCompressor(level=19).compress(b" " * (64 << 20))
        response = http.post(
            f"/runs/{rid}/episodes", content=bomb, headers={"Content-Encoding": "zstd"}
        )
        assert error_of(response)[:2] == (413, "decompressed_body_too_large")
        response = http.post(
            f"/runs/{rid}/metrics", content=b"x", headers={"Content-Encoding": "br"}
        )
        status, code, message = error_of(response)
        assert (status, code) == (415, "unsupported_encoding") and "zstd" in message
        big_json = http.post("/runs", json={"kind": "eval", "description": "x" * 8000})
        assert error_of(big_json)[:2] == (413, "body_too_large")
        assert upload(http, rid, "metrics", metric_rows(range(10), a=1.0)).status_code == 200


def test_uploads_after_the_grace_period_are_409(make_server):
    # Two servers instead of a sleep past a short grace: a loaded machine can take longer than
    # any short grace between the finish and the next upload.
    within = make_server(finish_grace=3600.0)
    with api(within.url) as http:
        rid = create_run(http)["id"]
        http.post(f"/runs/{rid}/finish", json={"status": "completed"})
        # Within the grace period the SDK's final drain still lands.
        assert upload(http, rid, "metrics", metric_rows([1], a=1.0)).status_code == 200
        assert upload(http, rid, "episodes", ndjson([{"id": "e"}])).status_code == 200
    past = make_server(finish_grace=0.0)
    with api(past.url) as http:
        rid = create_run(http)["id"]
        http.post(f"/runs/{rid}/finish", json={"status": "completed"})
        status, code, message = error_of(upload(http, rid, "metrics", metric_rows([2], a=1.0)))
        assert (status, code) == (409, "run_finished") and "completed" in message
        episodes = upload(http, rid, "episodes", ndjson([{"id": "e"}]))
        assert error_of(episodes)[:2] == (409, "run_finished")
        # Reads and metadata edits are not uploads.
        assert http.get(f"/runs/{rid}/metrics/keys").status_code == 200
        assert http.patch(f"/runs/{rid}", json={"tags": ["late"]}).status_code == 200


def test_overload_answers_503_with_retry_after(make_server):
    server = make_server(max_ingest_requests=1, ingest_queue_wait=0.5)
    release = threading.Event()
    with api(server.url) as http:
        rid = create_run(http)["id"]
        data = metric_rows(range(10), a=1.0)

        sent_first = threading.Event()

        def slow_body():
            yield data[:10]
            sent_first.set()  # httpx asks for the next chunk once the first is on the wire
            release.wait(10)
            yield data[10:]

        results: list[httpx.Response] = []
        holder = threading.Thread(
            target=lambda: results.append(http.post(f"/runs/{rid}/metrics", content=slow_body()))
        )
        holder.start()
        try:
            # Probe only once the holder is in: a probe that came first would take the single
            # slot itself, and the holder would be the one refused.
            assert sent_first.wait(10)
            time.sleep(0.5)
            deadline = time.monotonic() + patience.SETTLE  # the holder must reach the gate first
            while True:
                response = upload(http, rid, "metrics", metric_rows([99], a=2.0))
                if response.status_code == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert error_of(response)[:2] == (503, "overloaded")
            assert int(response.headers["Retry-After"]) >= 1
        finally:
            release.set()
            holder.join(10)
        assert results[0].status_code == 200
        assert upload(http, rid, "metrics", metric_rows([99], a=2.0)).status_code == 200
