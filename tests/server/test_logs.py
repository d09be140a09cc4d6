"""Console output over HTTP: upload with receipts, pages by stream and source, the tail, and the
bound per run (the middle dropped and counted, the head and the tail kept)."""

from __future__ import annotations

import pytest

from openruns.rundir import batch_key

from .helpers import create_run, error_of, ndjson, upload


def lines(n: int, start: int = 0, stream: str = "stdout", **extra) -> list[dict]:
    return [
        {"ts": 1.0e9 + i, "stream": stream, "line": f"line {i}", **extra}
        for i in range(start, start + n)
    ]


def test_lines_are_stored_in_arrival_order_and_a_replay_stores_nothing(client):
    rid = create_run(client)["id"]
    body = ndjson(lines(3) + lines(1, 3, "stderr") + [{"ts": 5, "stream": "stdout", "line": "é"}])
    answer = upload(client, rid, "logs", body)
    assert answer.json() == {"status": "committed", "lines": 5, "receipt": batch_key(body)}
    assert upload(client, rid, "logs", body).json()["lines"] == 5  # the first receipt
    page = client.get(f"/runs/{rid}/logs").json()
    assert [item["line"] for item in page["items"]] == ["line 0", "line 1", "line 2", "line 3", "é"]
    # Offsets are bytes of the whole output before each line (its newline counted).
    assert [item["offset"] for item in page["items"]] == [0, 7, 14, 21, 28]
    assert page["items"][3]["stream"] == "stderr" and page["items"][0]["source"] == "main"
    assert page["totals"] == {
        "lines": 5,
        "bytes": 31,
        "dropped_lines": 0,
        "dropped_bytes": 0,
        "gap_offset": None,
    }
    stderr = client.get(f"/runs/{rid}/logs", params={"stream": "stderr"}).json()["items"]
    assert [item["line"] for item in stderr] == ["line 3"]


def test_an_upload_of_thousands_of_lines_is_stored_whole(client):
    """2,500 lines in one upload: PostgreSQL writes them by COPY (store/sql.py, from 2,000
    rows), whose column list names `offset`, a keyword (a 500 before it was quoted)."""
    rid = create_run(client)["id"]
    answer = upload(client, rid, "logs", ndjson(lines(2500)))
    assert answer.status_code == 200, answer.text
    assert answer.json()["lines"] == 2500
    tail = client.get(f"/runs/{rid}/logs", params={"tail": "true", "limit": 2}).json()
    assert [item["line"] for item in tail["items"]] == ["line 2498", "line 2499"]
    assert tail["totals"]["lines"] == 2500


def test_pages_follow_offsets_forwards_and_the_tail_backwards(client):
    rid = create_run(client)["id"]
    upload(client, rid, "logs", ndjson(lines(10, source="trainer") + lines(2, 10)))
    first = client.get(f"/runs/{rid}/logs", params={"limit": 4}).json()["items"]
    assert [i["line"] for i in first] == [f"line {i}" for i in range(4)]
    after = client.get(f"/runs/{rid}/logs", params={"after": first[-1]["offset"], "limit": 3})
    assert [i["line"] for i in after.json()["items"]] == ["line 4", "line 5", "line 6"]
    tail = client.get(f"/runs/{rid}/logs", params={"tail": "true", "limit": 3}).json()["items"]
    assert [i["line"] for i in tail] == ["line 9", "line 10", "line 11"]
    above = client.get(
        f"/runs/{rid}/logs", params={"tail": "true", "limit": 2, "before": tail[0]["offset"]}
    ).json()["items"]
    assert [i["line"] for i in above] == ["line 7", "line 8"]
    trainer = client.get(f"/runs/{rid}/logs", params={"source": "trainer", "tail": "true"})
    assert len(trainer.json()["items"]) == 10


def test_beyond_the_bound_the_middle_is_dropped_and_counted(make_server):
    from .helpers import api

    # A bound of 1 MiB: the first 512 KiB stay, the newest 512 KiB stay, the rest is counted.
    server = make_server(max_log_bytes=1024 * 1024)
    with api(server.url) as client:
        rid = create_run(client)["id"]
        text = "x" * 1023  # 1 KiB a line with its newline
        for batch in range(3):
            body = ndjson(
                {"ts": 1.0e9 + i, "stream": "stdout", "line": f"{i:06d}{text[6:]}"}
                for i in range(batch * 1000, batch * 1000 + 1000)
            )
            assert upload(client, rid, "logs", body).status_code == 200
        totals = client.get(f"/runs/{rid}/logs", params={"limit": 1}).json()["totals"]
        assert totals["lines"] == 3000 and totals["bytes"] == 3000 * 1024
        kept_head = client.get(f"/runs/{rid}/logs", params={"limit": 5000}).json()["items"]
        numbers = [int(item["line"][:6]) for item in kept_head]
        # The head: every line that starts in the first 512 KiB; the tail: the newest 512 KiB.
        assert numbers[:512] == list(range(512))
        assert numbers[512:] == list(range(3000 - 512, 3000))
        assert totals["dropped_lines"] == 3000 - 1024
        assert totals["dropped_bytes"] == (3000 - 1024) * 1024
        assert totals["gap_offset"] == 512 * 1024


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"stream": "stdout", "line": "x"}', "line 1: ts must be a number"),
        (b'{"ts": 1, "stream": "Std Out", "line": "x"}', "line 1: stream must be"),
        (b'{"ts": 1, "stream": "stdout", "line": 3}', "line 1: line must be a string"),
        (b'{"ts": 1, "stream": "stdout", "line": "x", "source": ""}', "line 1: source must"),
    ],
)
def test_a_bad_line_is_a_400_naming_it(client, line, message):
    rid = create_run(client)["id"]
    status, code, text = error_of(upload(client, rid, "logs", line + b"\n"))
    assert (status, code) == (400, "invalid_log_line") and text.startswith(message)
    assert client.get(f"/runs/{rid}/logs").json()["items"] == []


def test_a_line_longer_than_the_limit_is_refused_whole(client):
    rid = create_run(client)["id"]
    body = ndjson(
        [
            {"ts": 1, "stream": "stdout", "line": "ok"},
            {"ts": 2, "stream": "stdout", "line": "y" * 70_000},
        ]
    )
    status, code, text = error_of(upload(client, rid, "logs", body))
    assert status == 400 and "line 2: line has 70000 characters" in text
    assert client.get(f"/runs/{rid}/logs").json()["totals"]["lines"] == 0


def test_reading_bad_parameters_is_a_400(client):
    rid = create_run(client)["id"]
    assert client.get(f"/runs/{rid}/logs", params={"stream": "NO"}).status_code in (400, 422)
    assert client.get(f"/runs/{rid}/logs", params={"limit": 0}).status_code in (400, 422)
    assert client.get("/runs/nope/logs").status_code == 404


def test_empty_uploads_store_nothing_and_are_not_conflicts(client):
    # Two empty bodies under different keys, then lines: each is an ordinary receipt (the fuzz
    # over the OpenAPI found the second empty upload answered 503 "write_conflict").
    rid = create_run(client)["id"]
    for key in ("empty-1", "empty-2"):
        answer = upload(client, rid, "logs", b"", key=key)
        assert answer.status_code == 200 and answer.json()["lines"] == 0, answer.text
    upload(client, rid, "logs", ndjson(lines(2)))
    page = client.get(f"/runs/{rid}/logs").json()
    assert [item["line"] for item in page["items"]] == ["line 0", "line 1"]
    assert page["totals"]["lines"] == 2
