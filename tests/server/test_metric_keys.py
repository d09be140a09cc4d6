"""A run's metric keys in pages (issue 21): keyset cursors, search, the recent order, bounds."""

from __future__ import annotations

import orjson
from sqlalchemy import text

from openruns.server.store import Store, key_pages

from .helpers import create_run, database_at, error_of, upload


def _row(step: int | None, values: dict[str, float], ts: float = 1.0e9) -> bytes:
    return orjson.dumps({"step": step, "ts": ts, "values": values}) + b"\n"


def _pages(client, rid: str, **params) -> list[dict]:
    """Every page of the keys, following next_cursor; each page's total is the same."""
    pages = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = client.get(f"/runs/{rid}/metrics/keys", params=query)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            return pages


def _many_keys_run(client) -> str:
    """A run of 250 keys: train/k000..k199 (logged at steps 0-1), eval/k000..k049 (only at
    step 0, then step 5 for eval/k007), and `inference/lag` logged both by step and by time."""
    rid = create_run(client)["id"]
    train = {f"train/k{i:03d}": float(i) for i in range(200)}
    evals = {f"eval/k{i:03d}": float(i) for i in range(50)}
    rows = _row(0, {**train, **evals}) + _row(1, train) + _row(5, {"eval/k007": 7.5})
    rows += _row(3, {"inference/lag": 1.0}) + _row(None, {"inference/lag": 2.0}, ts=2.0e9)
    assert upload(client, rid, "metrics", rows).status_code == 200
    return rid


def test_pages_cover_every_key_once_and_match_the_one_list(client):
    rid = _many_keys_run(client)
    whole = client.get(f"/runs/{rid}/metrics/keys").json()
    pages = _pages(client, rid, limit=37)
    assert {p["total"] for p in pages} == {251}
    assert len(pages) == 7  # 251 keys, 37 a page
    items = [item for page in pages for item in page["items"]]
    # A key logged both ways keeps its two entries on one page, labelled as in the one list.
    assert sorted(items, key=lambda r: (r["key"], r["axis"])) == whole
    assert len(whole) == 252
    both = [i for i in items if i["key"] == "inference/lag"]
    assert [b["label"] for b in both] == ["inference/lag", "inference/lag (by time)"]
    # Names run in the store's order, each page after the last: no key twice, none skipped.
    names = [page["items"][0]["key"] for page in pages]
    assert len(set(names)) == len(names)


def test_keys_searched_by_substring_or_prefix(client):
    rid = _many_keys_run(client)
    found = client.get(f"/runs/{rid}/metrics/keys", params={"q": "K04"}).json()
    # Any case: train/k040..k049 and eval/k040..k049.
    assert found["total"] == 20 and found["next_cursor"] is None
    assert {i["key"] for i in found["items"]} == {
        f"{part}/k{i:03d}" for part in ("train", "eval") for i in range(40, 50)
    }
    evals = _pages(client, rid, prefix="eval/", limit=20)
    assert [len(p["items"]) for p in evals] == [20, 20, 10]
    assert all(i["key"].startswith("eval/") for p in evals for i in p["items"])
    # The prefix is exact, and LIKE's wildcards are plain characters in either filter.
    assert client.get(f"/runs/{rid}/metrics/keys", params={"prefix": "EVAL/"}).json()["total"] == 0
    for wild in ("%", "_", "k0_1"):
        assert client.get(f"/runs/{rid}/metrics/keys", params={"q": wild}).json()["total"] == 0


def test_recent_order_puts_the_latest_steps_first(client):
    rid = _many_keys_run(client)
    pages = _pages(client, rid, order="recent", limit=60)
    keys = [i["key"] for p in pages for i in p["items"]]
    # eval/k007 at step 5, inference/lag at 3, the train keys at 1, the other eval keys at 0.
    assert keys[:4] == ["eval/k007", "inference/lag", "inference/lag", "train/k000"]
    assert len(set(keys)) == 251
    step_of = [i["last_step"] for p in pages for i in p["items"] if i["axis"] == "step"]
    assert step_of == sorted(step_of, reverse=True)


def test_bad_paging_is_refused_with_what_was_wrong(client):
    rid = _many_keys_run(client)
    bad = client.get(f"/runs/{rid}/metrics/keys", params={"cursor": "nonsense"})
    assert error_of(bad)[:2] == (400, "invalid_cursor")
    name_cursor = client.get(f"/runs/{rid}/metrics/keys", params={"limit": 5}).json()["next_cursor"]
    # A cursor of one order is not one of the other.
    mixed = client.get(
        f"/runs/{rid}/metrics/keys", params={"cursor": name_cursor, "order": "recent"}
    )
    assert error_of(mixed)[:2] == (400, "invalid_cursor")
    assert client.get(f"/runs/{rid}/metrics/keys", params={"limit": 0}).status_code == 422
    assert client.get(f"/runs/{rid}/metrics/keys", params={"limit": 5001}).status_code == 422


def test_the_one_list_is_refused_past_ten_thousand_keys(client):
    rid = create_run(client)["id"]
    stored = upload(client, rid, "metrics", _row(0, {f"m{i:05d}": 1.0 for i in range(10_001)}))
    assert stored.status_code == 200, stored.text
    status, code, message = error_of(client.get(f"/runs/{rid}/metrics/keys"))
    assert (status, code) == (400, "too_many_keys")
    assert "10001" in message and "limit=" in message
    page = client.get(f"/runs/{rid}/metrics/keys", params={"limit": 5000}).json()
    assert page["total"] == 10_001 and len(page["items"]) == 5000


def test_a_series_read_gives_at_most_500_keys(client):
    rid = create_run(client)["id"]
    names = [f"m{i:03d}" for i in range(501)]
    rows = _row(0, dict.fromkeys(names, 1.0)) + _row(1, {"m000": 2.0})
    assert upload(client, rid, "metrics", rows).status_code == 200
    # Every key of a run past the bound: refused, naming the bound and the way out.
    status, code, message = error_of(client.get(f"/runs/{rid}/metrics"))
    assert (status, code) == (400, "too_many_keys")
    assert "501 metric keys" in message and "500" in message and "keys=" in message
    asked = client.get(f"/runs/{rid}/metrics", params={"keys": ",".join(names)})
    assert error_of(asked)[:2] == (400, "too_many_keys")
    assert "501 keys were asked for" in error_of(asked)[2]
    # A repeated name counts once; 500 names are read, each downsampled unless asked.
    fine = client.get(f"/runs/{rid}/metrics", params={"keys": ",".join(names[:500] + ["m000"])})
    assert fine.status_code == 200 and len(fine.json()["series"]) == 500
    one = client.get(f"/runs/{rid}/metrics", params={"keys": "m000", "max_points": 1}).json()
    assert one["downsampled"] is True and one["series"]["m000"]["value"] == [2.0]


def test_several_runs_keys_are_read_at_once_as_each_alone(client):
    """GET /metrics/keys (the compare page's read): each run's page is its own route's first
    page, exactly, its next pages read there with its cursor; what cannot be answered is a 4xx
    that says so."""
    many, few = _many_keys_run(client), create_run(client)["id"]
    assert upload(client, few, "metrics", _row(2, {"loss": 1.0, "acc": 0.5})).status_code == 200
    for params in ({"order": "recent", "limit": 60}, {"q": "k04"}, {"prefix": "eval/"}, {}):
        both = client.get("/metrics/keys", params={**params, "runs": f"{many},{few},{many}"})
        assert both.status_code == 200, both.text
        answers = both.json()["runs"]
        assert list(answers) == [many, few]  # a repeated id answered once
        for rid in (many, few):
            alone = client.get(f"/runs/{rid}/metrics/keys", params={"limit": 500, **params})
            assert answers[rid] == alone.json(), params
    page = client.get("/metrics/keys", params={"runs": many, "limit": 200}).json()["runs"][many]
    rest = _pages(client, many, limit=200, cursor=page["next_cursor"])
    assert len(page["items"]) + sum(len(p["items"]) for p in rest) == 252
    status, code, message = error_of(client.get("/metrics/keys", params={"runs": f"{few},nope"}))
    assert status == 404 and "nope" in message, (code, message)
    assert error_of(client.get("/metrics/keys", params={"runs": ","}))[:2] == (400, "empty_read")
    ids = ",".join(f"r{i}" for i in range(101))
    assert error_of(client.get("/metrics/keys", params={"runs": ids}))[:2] == (
        400,
        "too_many_runs",
    )
    wide = {"runs": ",".join([few, *(f"x{i}" for i in range(11))]), "limit": 5000}
    status, code, message = error_of(client.get("/metrics/keys", params=wide))
    assert (status, code) == (400, "too_many_keys") and "12 runs x limit=5000" in message


def test_a_database_from_before_keeps_its_keys_in_recent_order(backend, stores_factory, tmp_path):
    """Migration 0015 fills each key's last step from its block summaries."""
    with database_at("0011", backend, stores_factory, tmp_path) as (url, conn):
        conn.execute(text("INSERT INTO metric_keys (id, run_seq, name) VALUES (1, 7, 'old'), "
                          "(2, 7, 'new'), (3, 7, 'by-time-only')"))  # fmt: skip
        blocks = "INSERT INTO metric_blocks VALUES (:key, 5, 0, 1, 1.0, 1.0, :step, 1.0)"
        conn.execute(text(blocks), [{"key": 1, "step": 3}, {"key": 2, "step": 900}])
    store = Store.open(url)  # migrates to the newest schema
    try:
        page = store.db.read_sync(lambda conn: key_pages.key_page(conn, 7, 10, order="recent"))
        # Entries need points (none were stored here): the order is in the keys' cursor.
        assert page.items == [] and page.after is None and page.total == 3
        order = store.db.read_sync(
            lambda conn: conn.execute(
                text("SELECT name, last_step FROM metric_keys ORDER BY last_step DESC")
            ).all()
        )
        assert [tuple(row) for row in order] == [("new", 900), ("old", 3), ("by-time-only", -1)]
    finally:
        store.close()
