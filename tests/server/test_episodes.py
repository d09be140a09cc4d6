"""Episodes over HTTP: ingest, replay, steps, sorted/filtered pages, one record, exports."""

from __future__ import annotations

import io

import orjson
import pyarrow.parquet as pq

from openruns.rundir import batch_key
from openruns.server.segments import FRAME_BYTES

from .helpers import create_run, episode, error_of, ndjson, upload


def all_pages(client, path, **params):
    items, cursor = [], None
    while True:
        page = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})}).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_ingest_replay_and_read_one_record_byte_for_byte(client):
    rid = create_run(client)["id"]
    records = [episode(i, step=i // 4, reward=float(i % 3)) for i in range(12)]
    data = ndjson(records)
    response = upload(client, rid, "episodes", data)
    assert response.json() == {"status": "committed", "records": 12, "receipt": batch_key(data)}
    again = upload(client, rid, "episodes", data, encoding="gzip")
    assert again.json() == response.json()
    assert len(all_pages(client, f"/runs/{rid}/episodes")) == 12
    got = client.get(f"/runs/{rid}/episodes/ep-2-9")
    assert got.headers["content-type"] == "application/json"
    assert got.content == orjson.dumps(records[9])
    assert error_of(client.get(f"/runs/{rid}/episodes/nope"))[:2] == (404, "not_found")


def test_steps_sorting_filters_and_pages(client):
    rid = create_run(client)["id"]
    records = [
        episode(
            i,
            step=i % 3,
            reward=None if i % 7 == 0 else float(i),
            ok=i % 2 == 0,
            env="code" if i % 5 == 0 else "math",
        )
        for i in range(60)
    ]
    upload(client, rid, "episodes", ndjson(records[:30]))
    upload(client, rid, "episodes", ndjson(records[30:]), encoding="identity")
    steps = client.get(f"/runs/{rid}/steps").json()
    assert [s["step"] for s in steps] == [0, 1, 2] and sum(s["count"] for s in steps) == 60
    step1 = [r for r in records if r["run"]["work"]["step"] == 1]
    rewards = [r["traces"][0]["reward"] for r in step1]
    mean = sum(x for x in rewards if x is not None) / len([x for x in rewards if x is not None])
    assert abs(steps[1]["avg_reward"] - mean) < 1e-9

    path = f"/runs/{rid}/episodes"
    best = all_pages(client, path, step=1, sort="-reward", limit=3)
    known = sorted((x for x in rewards if x is not None), reverse=True)
    assert [r["reward"] for r in best] == known + [None] * rewards.count(None)
    worst = all_pages(client, path, step=1, sort="reward", limit=4)
    assert [r["reward"] for r in worst] == sorted(known) + [None] * rewards.count(None)
    ok_code = all_pages(client, path, env="code", ok="true", limit=2)
    expected = [r["id"] for r in records if r["env"] == "code" and r["ok"]]
    assert sorted(r["id"] for r in ok_code) == sorted(expected)
    by_step = all_pages(client, path, sort="step", limit=7)
    assert [r["step"] for r in by_step] == sorted(r["step"] for r in by_step)
    row = by_step[0]
    assert set(row) == {"id", "stream", "step", "reward", "env", "ok", "tokens", "duration",
                        "kind", "subset", "trained_step"}  # fmt: skip
    assert row["tokens"] == 10 + int(row["id"].rsplit("-", 1)[1])


def test_steps_come_in_pages_either_way_with_the_stepless_row_last(client):
    rid = create_run(client)["id"]
    records = [episode(i, step=i // 2, reward=float(i)) for i in range(20)]  # steps 0..9
    records += [episode(100 + i, step=None, reward=None) for i in range(3)]
    upload(client, rid, "episodes", ndjson(records))
    path = f"/runs/{rid}/steps"

    def walk(**params):
        pages, after = [], None
        while True:
            query = {**params, **({"after": after} if after is not None else {})}
            page = client.get(path, params=query).json()
            pages.append([row["step"] for row in page])
            if len(page) < params["limit"] or page[-1]["step"] is None:
                return pages
            after = page[-1]["step"]

    assert walk(limit=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, None]]
    assert walk(limit=4, order="desc") == [[9, 8, 7, 6], [5, 4, 3, 2], [1, 0, None]]
    assert walk(limit=5) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [None]]
    newest = client.get(path, params={"order": "desc", "limit": 1}).json()
    assert newest == [{"step": 9, "count": 2, "scored": 2, "avg_reward": 18.5, "off_policy": 0}]
    stepless = client.get(path).json()[-1]
    assert stepless == {"step": None, "count": 3, "scored": 0, "avg_reward": None, "off_policy": 0}
    bounded = client.get(path, params={"step_min": 3, "step_max": 5, "order": "desc"}).json()
    assert [row["step"] for row in bounded] == [5, 4, 3]  # a bound leaves out the stepless row
    assert client.get(path, params={"step_min": 10}).json() == []
    for bad in ({"limit": 0}, {"limit": 10_001}, {"order": "newest"}):
        status, _, message = error_of(client.get(path, params=bad))
        assert status == 422 and next(iter(bad)) in message, message


def test_run_wide_pages_put_ties_in_arrival_order_and_nulls_last(client):
    """Pages of 3 over a whole run, across the turn from the rows with a value to the NULLs:
    each sort against a model. `-reward` is `reward` reversed, ties newest first; NULLs last
    in both, and filters hold in both parts."""
    rid = create_run(client)["id"]
    records = [
        episode(i, step=None if i % 5 == 0 else i % 4, reward=None if i % 3 == 0 else i % 2,
                env="code" if i % 7 == 0 else "math")
        for i in range(40)
    ]  # fmt: skip
    upload(client, rid, "episodes", ndjson(records[:25]))
    upload(client, rid, "episodes", ndjson(records[25:]))
    arrival = {r["id"]: n for n, r in enumerate(records)}

    def model(name: str, descending: bool, rows: list[dict]) -> list[str]:
        known = sorted(
            (r for r in rows if r[name] is not None),
            key=lambda r: (r[name], arrival[r["id"]]),
            reverse=descending,
        )
        nulls = sorted(
            (r for r in rows if r[name] is None), key=lambda r: arrival[r["id"]], reverse=descending
        )
        return [r["id"] for r in known + nulls]  # fmt: skip

    path = f"/runs/{rid}/episodes"
    every = all_pages(client, path, limit=1000)
    assert len(every) == 40 and any(r["step"] is None for r in every)
    for sort, name, descending in (("step", "step", False), ("reward", "reward", False),
                                   ("-reward", "reward", True)):  # fmt: skip
        got = all_pages(client, path, sort=sort, limit=3)
        assert [r["id"] for r in got] == model(name, descending, every), sort
        code = all_pages(client, path, sort=sort, env="code", limit=2)
        rows = [r for r in every if r["env"] == "code"]
        assert [r["id"] for r in code] == model(name, descending, rows), sort


def test_an_upload_of_thousands_of_records_is_indexed_whole_in_arrival_order(client):
    """2,500 records in one upload: PostgreSQL's bulk route (a COPY into a staging table of
    the columns given, the serial key left to the table) indexes them all, ties of a step in
    the order they came, and a replay adds nothing."""
    rid = create_run(client)["id"]
    records = [episode(i, step=i % 2, reward=float(i % 7), ok=i % 3 == 0) for i in range(2500)]
    data = ndjson(records)
    assert upload(client, rid, "episodes", data).json()["records"] == 2500
    assert upload(client, rid, "episodes", data).json()["records"] == 2500  # the same receipt
    for step in (0, 1):
        got = all_pages(client, f"/runs/{rid}/episodes", step=step, limit=1000)
        want = [r for r in records if r["run"]["work"]["step"] == step]
        assert [r["id"] for r in got] == [r["id"] for r in want]
        assert [(r["reward"], r["ok"]) for r in got] == [
            (r["traces"][0]["reward"], r["ok"]) for r in want
        ]
    assert client.get(f"/runs/{rid}/episodes/ep-1-2499").content == orjson.dumps(records[-1])


def test_a_filtered_run_wide_page_answers_after_a_window_with_what_it_found(
    client, backend, monkeypatch
):
    """A rare filter on a run-wide sort: on SQLite each page walks a window of the index and
    answers with what matched there (fewer rows than asked, even none) and a cursor after the
    window; PostgreSQL (which plans a rare value from its statistics) answers whole pages. The
    pages together are the model's, in every sort."""
    monkeypatch.setattr("openruns.server.store.episodes.SCAN_ROWS", 4)
    monkeypatch.setattr("openruns.server.store.episodes.SCAN_SECONDS", 0.0)  # one window a page
    rid = create_run(client)["id"]
    records = [
        episode(i, step=None if i % 5 == 0 else i % 4, reward=None if i % 3 == 0 else i % 2,
                env="code" if i % 7 == 0 else "math", ok=i % 11 != 0)
        for i in range(60)
    ]  # fmt: skip
    upload(client, rid, "episodes", ndjson(records))
    arrival = {r["id"]: n for n, r in enumerate(records)}
    path = f"/runs/{rid}/episodes"
    every = all_pages(client, path, limit=1000)  # unfiltered: whole pages, as before
    for sort, name, descending in (("step", "step", False), ("reward", "reward", False),
                                   ("-reward", "reward", True)):  # fmt: skip
        for where, keep in (({"env": "code"}, lambda r: r["env"] == "code"),
                            ({"ok": "false"}, lambda r: not r["ok"])):  # fmt: skip
            pages, cursor = [], None
            while True:
                query = {
                    **where,
                    "sort": sort,
                    "limit": 3,
                    **({"cursor": cursor} if cursor else {}),
                }
                page = client.get(path, params=query).json()
                pages.append(len(page["items"]))
                assert len(pages) <= 60, "no end"
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            got = [r["id"] for r in all_pages(client, path, **where, sort=sort, limit=3)]
            rows = [r for r in every if keep(r)]
            known = sorted(
                (r for r in rows if r[name] is not None),
                key=lambda r: (r[name], arrival[r["id"]]),
                reverse=descending,
            )
            nulls = sorted((r for r in rows if r[name] is None),
                           key=lambda r: arrival[r["id"]], reverse=descending)  # fmt: skip
            assert got == [r["id"] for r in known + nulls], (sort, where)
            if backend == "sqlite":
                assert 0 in pages[:-1] and max(pages) <= 3, pages  # short pages, not the last
            else:
                assert all(n == 3 for n in pages[:-1]), pages


def test_traces_stream_ids_and_large_records(client):
    rid = create_run(client)["id"]
    traces = [{"id": "a/b?c", "reward": 1.0, "step": 3}, {"no_id": True}]
    assert upload(client, rid, "episodes", ndjson(traces), stream="traces").status_code == 200
    rows = client.get(f"/runs/{rid}/episodes", params={"stream": "traces"}).json()["items"]
    assert [r["stream"] for r in rows] == ["traces", "traces"] and rows[0]["step"] == 3
    assert len(rows[1]["id"]) == 32  # the server names a record that has no id
    assert client.get(f"/runs/{rid}/episodes/a%2Fb%3Fc").json() == traces[0]
    assert client.get(f"/runs/{rid}/episodes/{rows[1]['id']}").json() == traces[1]
    assert client.get(f"/runs/{rid}/episodes").json()["items"] == []

    big = [episode(i, step=0, reward=1.0, blob="x" * (FRAME_BYTES // 2 + i)) for i in range(5)]
    upload(client, rid, "episodes", ndjson(big))
    for record in big:
        assert client.get(f"/runs/{rid}/episodes/{record['id']}").json() == record


def test_bad_lines_are_named_and_nothing_is_stored(client):
    rid = create_run(client)["id"]
    body = ndjson([episode(0, 0, 1.0)]) + b"\n" + b'"just a string"\n'
    status, code, message = error_of(upload(client, rid, "episodes", body))
    assert (status, code) == (400, "invalid_ndjson") and message.startswith("line 3:")
    big_step = b'{"id": "x", "step": 18446744073709551615}\n'  # fits u64, not SQL's i64
    assert error_of(upload(client, rid, "episodes", big_step))[0] == 400
    assert client.get(f"/runs/{rid}/steps").json() == []
    stream = upload(client, rid, "episodes", b"{}\n", stream="logs")
    assert error_of(stream)[0] == 422


def test_exports_stream_everything(client):
    rid = create_run(client)["id"]
    records = [episode(i, step=i, reward=i / 2) for i in range(7)]
    upload(client, rid, "episodes", ndjson(records[:3]))
    upload(client, rid, "episodes", ndjson(records[3:]))
    rows = b'{"step": 1, "ts": 5.0, "values": {"a": 1, "b": 2}}\n{"step": 2, "values": {"a": 3}}\n'
    upload(client, rid, "metrics", rows)

    nd = client.get(f"/runs/{rid}/export/episodes.ndjson")
    assert nd.headers["content-type"] == "application/x-ndjson"
    assert nd.content == ndjson(records)
    table = pq.read_table(io.BytesIO(client.get(f"/runs/{rid}/export/episodes.parquet").content))
    assert table.column_names == [
        "id",
        "stream",
        "step",
        "reward",
        "env",
        "ok",
        "tokens",
        "duration",
        "kind",
        "subset",
        "trained_step",
        "record",
    ]
    assert [orjson.loads(r) for r in table.column("record").to_pylist()] == records
    assert table.column("reward").to_pylist() == [i / 2 for i in range(7)]

    lines = client.get(f"/runs/{rid}/export/metrics.ndjson").content.splitlines()
    assert [orjson.loads(line) for line in lines] == [
        {"key": "a", "step": 1, "value": 1.0, "ts": 5.0},
        {"key": "a", "step": 2, "value": 3.0, "ts": None},
        {"key": "b", "step": 1, "value": 2.0, "ts": 5.0},
    ]
    metrics = pq.read_table(io.BytesIO(client.get(f"/runs/{rid}/export/metrics.parquet").content))
    assert metrics.to_pylist() == [orjson.loads(line) for line in lines]
    empty = create_run(client)["id"]
    assert (
        pq.read_table(
            io.BytesIO(client.get(f"/runs/{empty}/export/metrics.parquet").content)
        ).num_rows
        == 0
    )
    assert client.get(f"/runs/{rid}/export/other.csv").status_code == 422
