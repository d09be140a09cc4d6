"""Console capture's pure parts: lines cut from writes, the bound on what waits (counted, not
kept), the note of what was dropped, a traceback as one record. The tee in a real process,
pipes and followed files are in tests/sdk/test_console.py."""

from __future__ import annotations

from openruns.console import (
    MAX_LINE_CHARS,
    ConsoleCapture,
    LineCutter,
    dropped_note,
    traceback_record,
)


def lines_of(records: list[dict]) -> list[str]:
    return [r["line"] for r in records]


def test_lines_end_at_newlines_and_a_carriage_return_starts_one_again():
    cut = LineCutter("stdout", "main")
    assert cut.feed("hel", 1.0) == []
    first = cut.feed("lo\nwor", 2.0)
    assert first == [{"ts": 1.0, "stream": "stdout", "source": "main", "line": "hello"}]
    assert lines_of(cut.feed("ld\r\n", 3.0)) == ["world"]
    # A progress bar: only its last state is a line.
    assert cut.feed("10%\r50%\r", 4.0) == []
    assert lines_of(cut.feed("100%\n", 5.0)) == ["100%"]
    assert lines_of(cut.feed("no end", 6.0)) == []
    assert cut.close() == [{"ts": 6.0, "stream": "stdout", "source": "main", "line": "no end"}]
    assert cut.close() == []


def test_a_long_line_is_cut_and_bytes_split_inside_a_character_decode_whole():
    cut = LineCutter("stdout", "main")
    out = cut.feed("x" * (2 * MAX_LINE_CHARS + 5) + "\n", 1.0)
    assert [len(line) for line in lines_of(out)] == [MAX_LINE_CHARS, MAX_LINE_CHARS, 5]
    data = "é = ∑\n".encode()
    assert cut.feed_bytes(data[:1], 1.0) == []
    assert lines_of(cut.feed_bytes(data[1:], 1.0)) == ["é = ∑"]


def test_beyond_the_bound_writes_are_counted_not_kept():
    emitted: list[dict] = []
    capture = ConsoleCapture(emitted.extend, flush_interval=30, max_pending_bytes=100)
    capture._active = True  # the write path alone, without replacing this process's streams
    capture._thread = None
    for _ in range(50):
        capture._take("stdout", "0123456789\n")
    capture._drain(final=True)
    kept = [r for r in emitted if r["stream"] == "stdout"]
    assert len(kept) == 10  # until more than the bound (100 chars) waits, then dropped
    assert capture.dropped_chars == 40 * 11
    # The run says it in one line at its end (Run._teardown), with the pipeline's drops.
    note = dropped_note(capture.dropped_chars)
    assert note["stream"] == "stderr" and note["source"] == "main"
    assert f"{40 * 11} characters of console output were not kept" in note["line"]


def test_a_traceback_is_one_record():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        record = traceback_record(exc, source="trainer")
    assert record["stream"] == "traceback" and record["source"] == "trainer"
    lines = record["line"].splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"
