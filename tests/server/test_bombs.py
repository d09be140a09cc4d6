"""
Decompression bombs cost bounded memory and work (issue 12): a body is measured as a stream
(bytes, lines, the longest line) before anything is decoded into memory.

The memory test runs `openruns server` as a child process and reads its high-water mark
(VmHWM in /proc/PID/status): a 1 GiB bomb must be refused without the server ever holding
anything near 1 GiB. The bound is generous (a quarter of the bomb); before the fix the server
held the whole expansion.
"""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

import httpx
import pytest
import zstandard

from .helpers import ServerProcess, api, create_run, error_of

MiB = 1 << 20
GiB = 1 << 30


def _zstd_bomb(piece: bytes, size: int) -> bytes:
    """`size` bytes of repeated `piece`, zstd-compressed as a stream (never held expanded)."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    block = piece * (MiB // len(piece))
    out = [compressor.compress(block) for _ in range(size // len(block))]
    out.append(compressor.flush())
    return b"".join(out)


def _gzip_bomb(piece: bytes, size: int) -> bytes:
    compressor = zlib.compressobj(1, wbits=31)  # level 1: built in a second, still ~200:1
    block = piece * (MiB // len(piece))
    out = [compressor.compress(block) for _ in range(size // len(block))]
    out.append(compressor.flush())
    return b"".join(out)


def _post(http: httpx.Client, run_id: str, body: bytes, encoding: str) -> httpx.Response:
    headers = {"Content-Encoding": encoding, "Content-Type": "application/x-ndjson"}
    return http.post(f"/runs/{run_id}/metrics", content=body, headers=headers, timeout=120)


def test_a_blank_line_bomb_is_refused_after_a_bounded_number_of_lines(make_server):
    # 512 MiB of newlines in a few hundred KiB: under the byte cap, so only counting lines
    # stops it (before the fix: half a GiB decoded into memory, then half a billion blank
    # lines parsed one by one, minutes of work).
    server = make_server()
    bomb = _zstd_bomb(b"\n", 512 * MiB)
    assert len(bomb) < 512 * 1024
    with api(server.url) as http:
        rid = create_run(http)["id"]
        status, code, message = error_of(_post(http, rid, bomb, "zstd"))
        assert (status, code) == (413, "too_many_lines"), message
        # Lines of spaces are blank lines too.
        status, code, _ = error_of(_post(http, rid, _gzip_bomb(b"  \n", 64 * MiB), "gzip"))
        assert (status, code) == (413, "too_many_lines")
        # One endless line is refused at the longest line allowed.
        status, code, _ = error_of(_post(http, rid, _zstd_bomb(b" ", 128 * MiB), "zstd"))
        assert (status, code) == (413, "line_too_large")
        # A body within the bounds still goes in.
        ok = _post(
            http, rid, zstandard.compress(b'\n\n{"step": 1, "values": {"a": 1}}\n\n'), "zstd"
        )
        assert ok.status_code == 200, ok.text


def _high_water_mark(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_gib_bombs_are_refused_without_the_memory_of_their_expansion(tmp_path):
    # Lines of 4 KiB, each a JSON object: no line or line-count limit stops them; only the
    # byte cap (1 GiB, the default) does, after decoding a GiB through a bounded window.
    line = b'{"step": 1, "values": {}, "pad": "' + b"x" * 4050 + b'"}\n'
    bombs = [
        ("zstd", _zstd_bomb(line, GiB + 16 * MiB)),
        ("gzip", _gzip_bomb(line, GiB + 16 * MiB)),
    ]
    server = ServerProcess(tmp_path / "data").start()
    try:
        assert server.proc is not None
        with api(server.url) as http:
            rid = create_run(http)["id"]
            baseline = _high_water_mark(server.proc.pid)
            answers: list[httpx.Response] = []
            health: list[int] = []

            def send(encoding: str, body: bytes) -> None:
                with api(server.url) as own:
                    answers.append(_post(own, rid, body, encoding))

            # Four at once (two of each): the server stays within its memory and answers.
            threads = [threading.Thread(target=send, args=bomb) for bomb in bombs + bombs]
            for thread in threads:
                thread.start()
            health.append(http.get("/health").status_code)
            for thread in threads:
                thread.join(300)
            assert len(answers) == 4
            for answer in answers:
                assert error_of(answer)[:2] == (413, "decompressed_body_too_large"), answer.text
            assert health == [200]
            peak = _high_water_mark(server.proc.pid)
            assert peak - baseline < GiB // 4, (baseline, peak)
            # The server still takes a real upload.
            ok = _post(http, rid, zstandard.compress(b'{"step": 1, "values": {"a": 1}}\n'), "zstd")
            assert ok.status_code == 200, ok.text
    finally:
        server.stop()
