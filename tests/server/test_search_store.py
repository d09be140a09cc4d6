"""The search index at the store level, the same tests on SQLite (FTS5) and PostgreSQL
(tsvector + GIN): the indexer follows committed segments, queries narrow to a run, filters
and the cursor hold, a second indexer (a replica) never indexes a row twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import orjson
import pytest

from openruns.server.admission import IngestGate
from openruns.server.config import ServerSettings
from openruns.server.limits import RateLimiter
from openruns.server.rollouts import Query
from openruns.server.search_indexer import index_round
from openruns.server.segments import build_segment
from openruns.server.state import ServerState
from openruns.server.store import LocalBlobStore, Store, search


@pytest.fixture
def state(backend, stores_factory, tmp_path) -> Iterator[ServerState]:
    """A server's state on this module's backend (tests/services.py: SQLite, or a fresh
    database of the session's PostgreSQL cluster); blobs in a local directory either way."""
    stores = stores_factory.new(backend, tmp_path / "data")
    store = Store.open(stores.database_url())
    settings = ServerSettings(data_dir=tmp_path)
    yield ServerState(
        settings=settings,
        auth_enabled=False,
        store=store,
        blobs=LocalBlobStore(tmp_path / "blobs"),
        limiter=RateLimiter(0, 1),
        gate=IngestGate(4, 1 << 30),
    )
    store.close()


def _commit(
    state: ServerState, run_seq: int, records: list[dict], stream: str = "episodes"
) -> None:
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    segment = build_segment(data)
    key = f"runs/{run_seq}/{stream}/{time.monotonic_ns()}.zst"
    state.blobs.put_atomic(key, segment.blob)
    asyncio.run(
        state.store.commit_segment(run_seq, key, stream, key, len(segment.blob), segment.rows)
    )


def _index_all(state: ServerState) -> int:
    total = 0
    while indexed := asyncio.run(index_round(state)):
        total += indexed
    return total


def _hits(state: ServerState, run_seq: int, q: str, **filters) -> list[dict]:
    params = {
        "stream": "episodes",
        "kind": None,
        "step_min": None,
        "step_max": None,
        "env": None,
        "ok": None,
        "reward_min": None,
        "reward_max": None,
        "limit": 100,
        "before_seq": None,
    }
    return asyncio.run(
        state.store.read(search.search, run_seq, Query.parse(q), **{**params, **filters})
    )


def _search(state: ServerState, run_seq: int, q: str, **filters) -> list[str]:
    return [h["id"] for h in _hits(state, run_seq, q, **filters)]


def _record(i: int, text: str, kind: str = "train") -> dict:
    return {
        "id": f"r{i}",
        "run": {"type": "train", "work": {"type": kind, "step": i // 3}},
        "env": "code" if i % 2 else "math",
        "ok": i % 4 != 0,
        "messages": [{"role": "user", "content": text}],
        "reward": i / 10,
    }


def _runs(state: ServerState) -> tuple[int, int]:
    a, _ = asyncio.run(state.store.create_run("default", {"id": "run-a", "kind": "train"}, None))
    b, _ = asyncio.run(state.store.create_run("default", {"id": "run-b", "kind": "train"}, None))
    return a["seq"], b["seq"]


def test_indexer_follows_segments_and_queries_narrow_to_a_run(state):
    a, b = _runs(state)
    _commit(
        state,
        a,
        [_record(i, f"the quick brown fox {i}", "eval" if i == 4 else "train") for i in range(9)],
    )
    _commit(state, b, [_record(100, "the quick brown fox in another run")])
    assert _search(state, a, "fox") == []  # not indexed yet: built behind ingest
    assert asyncio.run(state.store.read(search.run_progress, a)) == {"pending": 9}
    assert _index_all(state) == 10
    assert asyncio.run(state.store.read(search.run_progress, a)) == {"pending": 0}
    newest_first = [f"r{i}" for i in reversed(range(9))]
    assert _search(state, a, "FOX quick") == newest_first
    assert _search(state, a, '"brown fox"') == newest_first
    assert _search(state, a, '"fox brown"') == []
    assert _search(state, a, "qui*") == newest_first
    assert _search(state, a, "qui") == []
    assert _search(state, b, "fox") == ["r100"]
    assert _search(state, a, "fox", kind="eval") == ["r4"]
    assert _search(state, a, "fox", step_min=1, step_max=1) == ["r5", "r4", "r3"]
    assert _search(state, a, "fox", env="math", ok=False) == ["r8", "r4", "r0"]
    assert _search(state, a, "fox", reward_min=0.25, reward_max=0.5) == ["r5", "r4", "r3"]
    page = _hits(state, a, "fox", limit=2)
    assert [h["id"] for h in page] == ["r8", "r7"] and page[1]["ok"] is True
    rest = _search(state, a, "fox", before_seq=page[1]["seq"])
    assert rest == newest_first[2:]
    # Newly committed rows are picked up by the next round.
    _commit(state, a, [_record(9, "a late fox")])
    assert _index_all(state) == 1
    assert _search(state, a, "late") == ["r9"]


def test_a_second_indexer_that_lost_the_race_writes_nothing(state):
    a, _ = _runs(state)
    _commit(state, a, [_record(i, "zebra") for i in range(3)])
    cursor = asyncio.run(state.store.read(search.indexed_seq))
    rows = asyncio.run(state.store.read(search.pending, cursor, 100))
    assert _index_all(state) == 3
    # A replica that read the same rows before the cursor moved: its write is refused.
    docs = [(r["seq"], r["run_seq"], r["stream"], None, "zebra again") for r in rows]
    assert (
        asyncio.run(state.store.write(search.add_documents, cursor, rows[-1]["seq"], docs)) is False
    )
    assert _search(state, a, "zebra") == ["r2", "r1", "r0"]
    assert _search(state, a, "again") == []


def test_a_missing_segment_is_indexed_without_text_and_does_not_stop_the_indexer(state):
    a, _ = _runs(state)
    _commit(state, a, [_record(0, "lost words")])
    key = asyncio.run(state.store.read(search.pending, 0, 10))[0]["blob_key"]
    (state.settings.data_dir / "blobs" / key).unlink()
    _commit(state, a, [_record(1, "kept words")])
    assert _index_all(state) == 2
    assert _search(state, a, "words") == ["r1"]
