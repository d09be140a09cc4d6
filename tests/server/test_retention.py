"""
Retention (issue 22) on a real server, on both stores (SQLite + folder, PostgreSQL + S3): an
ended run older than its rule keeps its metrics and a deterministic sample of its episodes per
(stream, kind, step); the rest go (rows, search entries, blob bytes: segments rewritten or
deleted), every kept record still reads back verified, the run's record and route say what was
dropped, a younger or running run is untouched, two replicas reduce a run once, the periodic
pass in the server does it by itself, and `openruns server retention --dry-run` changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import orjson
from sqlalchemy import update

from openruns.api import Client
from openruns.cli import main as openruns_main
from openruns.server.retention.reduce import run_pass
from openruns.server.retention_policy import EpisodeRow, RetentionRule, sample
from openruns.server.store import retention as retention_sql
from openruns.server.store.schema import run_retention

from .. import patience
from .helpers import SRC, api, create_run, episode, ndjson, upload
from .test_deletion import seq_of
from .test_rollouts import wait_indexed

DAY = 86400.0


def word(kind: str, step: int | str, i: int | str) -> str:
    return f"quokka{kind}{step}x{i}"


STEPS = 4
PER_KIND = 12  # episodes per (kind, step): more than the sample keeps


def _episodes(
    run_id: str, step: int, kind: str, count: int = PER_KIND, prefix: str = ""
) -> list[dict[str, Any]]:
    """Records with ids `<prefix><kind>-<step>-<i>`, each with a word of its own to search."""
    out = []
    for i in range(count):
        rec = episode(i, step, (i * 7 % 11) / 10, prompt=f"{word(prefix + kind, step, i)} {run_id}")
        rec["id"] = f"{prefix}{kind}-{step}-{i}"
        rec["run"] = {"work": {"step": step, "type": kind}}
        out.append(rec)
    return out


def seed(http: httpx.Client, project: str, finish: bool = True) -> str:
    """A run of `project`: metrics, train and eval episodes over STEPS steps (a segment per
    step, and one more holding every step's eval episodes), its traces stream, console lines."""
    rid = create_run(http, project=project)["id"]
    rows = [{"step": s, "ts": 1.0e9 + s, "values": {"loss": 1.0 / (s + 1)}} for s in range(50)]
    assert upload(http, rid, "metrics", ndjson(rows)).status_code == 200
    for step in range(STEPS):
        assert (
            upload(http, rid, "episodes", ndjson(_episodes(rid, step, "train"))).status_code == 200
        )
    evals = [rec for step in range(STEPS) for rec in _episodes(rid, step, "eval")]
    assert upload(http, rid, "episodes", ndjson(evals)).status_code == 200
    traces = ndjson(_episodes(rid, 0, "train", 10, prefix="trace"))
    assert upload(http, rid, "episodes", traces, stream="traces").status_code == 200
    notes = ndjson([{"episode_id": "train-0-1", "step": 1, "advantage": 0.5}])
    assert upload(http, rid, "annotations", notes).status_code == 200
    lines = ndjson([{"ts": 1.0e9 + i, "stream": "stdout", "line": f"line {i}"} for i in range(5)])
    assert upload(http, rid, "logs", lines).status_code == 200
    if finish:
        done = http.post(f"/runs/{rid}/finish", json={"status": "completed"})
        assert done.status_code == 200, done.text
    return rid


def index(http: httpx.Client, rid: str, stream: str = "episodes") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, "stream": stream}
        if cursor:
            params["cursor"] = cursor
        body = http.get(f"/runs/{rid}/episodes", params=params).json()
        items += body["items"]
        cursor = body.get("next_cursor")
        if not cursor:
            return items


def records(http: httpx.Client, rid: str, stream: str = "episodes") -> dict[str, bytes]:
    """Every record of the stream, as its single-record read answers it (checked reads)."""
    out = {}
    for item in index(http, rid, stream):
        response = http.get(f"/runs/{rid}/episodes/{item['id']}", params={"annotations": False})
        assert response.status_code == 200, response.text
        out[item["id"]] = response.content
    return out


def expected_sample(http: httpx.Client, rid: str, keep: int) -> set[str]:
    """The ids the rule keeps, by rules.sample over the index as the API lists it."""
    kept: set[str] = set()
    for stream in ("episodes", "traces"):
        items = index(http, rid, stream)
        rows = [
            EpisodeRow(i, stream, it["kind"], it["step"], it["id"], it["reward"])
            for i, it in enumerate(items)
        ]
        kept |= {f"{stream}/{items[i]['id']}" for i in sample(rows, keep)}
    return kept


def held(http: httpx.Client, rid: str) -> set[str]:
    return {f"{s}/{it['id']}" for s in ("episodes", "traces") for it in index(http, rid, s)}


def run_bytes(stores, seq: int) -> int:
    return sum(i.size for i in stores.open_blobs().list_blobs(f"runs/{seq}/"))


def reduce(stores, rules: list[RetentionRule], as_of: float, **kw: Any) -> list[dict[str, Any]]:
    store = stores.open_store()
    try:
        return asyncio.run(run_pass(store, stores.open_blobs(), rules, as_of=as_of, **kw))
    finally:
        store.close()


def hits(http: httpx.Client, rid: str, word: str) -> list[str]:
    body = http.get(f"/runs/{rid}/search", params={"q": word}).json()
    return [item["id"] for item in body["items"]]


def test_an_old_run_is_reduced_to_its_sample_and_others_are_untouched(make_server, new_stores):
    stores = new_stores()
    # The running run never heartbeats: at the default timeout (45 s) a loaded machine saw the
    # sweep mark it crashed mid-test, an ended old run the second pass then reduced.
    server = make_server(stores, heartbeat_timeout=3600.0)
    with api(server.url) as http:
        old = seed(http, "old")
        young = seed(http, "young")
        running = seed(http, "old", finish=False)
        wait_indexed(http, old)
        before = {s: records(http, old, s) for s in ("episodes", "traces")}
        want = expected_sample(http, old, 5)
        others = {rid: held(http, rid) for rid in (young, running)}
        seq = seq_of(stores, old)
        bytes_before = run_bytes(stores, seq)
        assert hits(http, old, word("train", 2, 3)) == ["train-2-3"]

        rules = [RetentionRule(1.0, 5, project="old"), RetentionRule(3.0, 5)]
        reports = reduce(stores, rules, time.time() + 2 * DAY, slice_rows=7)
        assert [r["id"] for r in reports] == [old]
        (report,) = reports
        total = sum(len(v) for v in before.values())
        assert report["episodes"] == total and report["episodes_kept"] == len(want)
        assert report["episodes_dropped"] == total - len(want) > 0

        # The sample is what is left, per (stream, kind, step) at most 5.
        assert held(http, old) == want
        for stream, kept in before.items():
            now = records(http, old, stream)  # every read checks the frames' digest
            assert now == {k: v for k, v in kept.items() if f"{stream}/{k}" in want}
        gone = sorted(k for k in before["episodes"] if f"episodes/{k}" not in want)
        assert http.get(f"/runs/{old}/episodes/{gone[0]}").status_code == 404
        # Bytes on disk (or in the bucket) shrink; every blob left is a segment's.
        assert run_bytes(stores, seq) < bytes_before
        assert report["bytes_dropped"] > 0 and report["bytes_kept"] == run_bytes(stores, seq)
        status = openruns_main(
            ["server", "check", *stores.cli_args(), "--verify", "--min-age-hours", "0"]
        )
        assert status == 0
        # Search finds the kept records, and no dropped one.
        kept_id = sorted(k for k in before["episodes"] if f"episodes/{k}" in want)[0]
        assert hits(http, old, word(*kept_id.split("-"))) == [kept_id]
        assert hits(http, old, word(*gone[0].split("-"))) == []
        # Metrics stay; the record and the route say what happened.
        series = http.get(f"/runs/{old}/metrics", params={"keys": "loss", "max_points": 0})
        assert series.status_code == 200 and "0.5" in series.text
        answer = http.get(f"/runs/{old}/retention").json()
        assert answer["reduced"] is True and answer["episodes_kept"] == len(want)
        assert answer["episodes_dropped"] == total - len(want)
        assert answer["rule"] == {"team": None, "project": "old", "after_days": 1.0,
                                  "keep_per_step": 5}  # fmt: skip
        assert answer["reduced_at"] > time.time() - 600
        for rid, ids in others.items():
            assert held(http, rid) == ids
            assert http.get(f"/runs/{rid}/retention").json() == {"id": rid, "reduced": False}
        assert http.get("/runs/nope/retention").status_code == 404

        # Again: nothing more to do. A smaller keep is a subset, the same as from the start.
        assert reduce(stores, rules, time.time() + 2 * DAY) == []
        assert held(http, old) == want
        smaller = [RetentionRule(1.0, 2, project="old")]
        assert [r["id"] for r in reduce(stores, smaller, time.time() + 2 * DAY)] == [old]
        left = held(http, old)
        assert left < want and len(left) == len({i.rsplit("-", 1)[0] for i in want}) * 2
        assert http.get(f"/runs/{old}/retention").json()["episodes_dropped"] == total - len(left)


def test_two_replicas_reduce_a_run_once(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = seed(http, "p")
        want = expected_sample(http, rid, 3)
        total = len(held(http, rid))
    rules = [RetentionRule(1.0, 3)]
    a, b = stores.open_store(), stores.open_store()
    blobs = stores.open_blobs()

    async def both() -> list[list[dict[str, Any]]]:
        as_of = time.time() + 2 * DAY
        return list(
            await asyncio.gather(
                run_pass(a, blobs, rules, as_of=as_of, slice_rows=5),
                run_pass(b, blobs, rules, as_of=as_of, slice_rows=5),
            )
        )

    try:
        reports = asyncio.run(both())
        record = a.db.read_sync(retention_sql.record, seq_of(stores, rid))
    finally:
        a.close()
        b.close()
    assert sorted(len(r) for r in reports) == [0, 1]
    assert record is not None and record["episodes_dropped"] == total - len(want)
    with api(server.url) as http:
        assert held(http, rid) == want


def test_the_server_reduces_old_runs_by_itself(make_server, new_stores):
    stores = new_stores()
    # The constructor takes any interval (the flag refuses one under 60 s).
    server = make_server(stores, retention=(RetentionRule(1e-6, 2),), retention_interval=0.2)
    with api(server.url) as http:
        rid = seed(http, "p")
        deadline = time.monotonic() + patience.START
        while not http.get(f"/runs/{rid}/retention").json()["reduced"]:
            assert time.monotonic() < deadline, "the periodic pass did not reduce the run"
            time.sleep(0.2)
        assert len(index(http, rid)) == STEPS * 2 * 2  # (train, eval) x steps, 2 each
    with Client(server.url) as reader:  # the read client says it too
        facts = reader.retention(rid)
    assert facts["reduced"] is True and facts["rule"]["keep_per_step"] == 2
    assert facts["episodes_kept"] == STEPS * 2 * 2 + 2  # and the traces' one group


def _command(stores, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openruns.cli", "server", "retention", *stores.cli_args(), *flags],
        env={**os.environ, "PYTHONPATH": SRC, "OPENRUNS_SERVER_CONFIG": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=patience.START,
    )


def test_the_command_dry_run_changes_nothing(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = seed(http, "p")
        ids = held(http, rid)
        want = expected_sample(http, rid, 8)
    seq = seq_of(stores, rid)
    size = run_bytes(stores, seq)
    time.sleep(0.2)  # older than the 0.0864 s of the rule

    none = _command(stores, "--dry-run")
    assert none.returncode == 2 and "no retention policy is configured" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1

    dry = _command(stores, "--retention-days", "0.000001", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    document = orjson.loads(dry.stdout)
    assert document["dry_run"] is True and [r["id"] for r in document["runs"]] == [rid]
    assert document["episodes_dropped"] == len(ids) - len(want)
    assert 0 < document["bytes_dropped"] < size
    with api(server.url) as http:
        assert held(http, rid) == ids
        assert http.get(f"/runs/{rid}/retention").json()["reduced"] is False
    assert run_bytes(stores, seq) == size

    done = _command(stores, "--retention-days", "0.000001")
    assert done.returncode == 0, done.stderr
    assert f"/p/{rid}: dropped {len(ids) - len(want)} of {len(ids)} episodes" in done.stdout
    with api(server.url) as http:
        assert held(http, rid) == want


def test_a_too_short_interval_is_refused_in_one_line(tmp_path, capsys):
    status = openruns_main(["server", "--data-dir", str(tmp_path), "--retention-interval", "5"])
    err = capsys.readouterr().err
    assert status == 2 and "at least 60 s" in err and len(err.strip().splitlines()) == 1


def test_a_live_claim_is_left_alone_and_a_stale_one_taken_up(make_server, new_stores):
    """A pass another replica holds is skipped; one whose server stopped (its claim older
    than the lease) is finished by the next pass; a deleted run's record goes with it."""
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = seed(http, "p")
        want = expected_sample(http, rid, 4)
        ids = held(http, rid)
    seq = seq_of(stores, rid)
    rules = [RetentionRule(1.0, 4)]
    store = stores.open_store()
    try:
        assert store.db.write_sync(retention_sql.claim, seq, rules[0].describe(), time.time())
    finally:
        store.close()
    assert reduce(stores, rules, time.time() + 2 * DAY) == []
    with api(server.url) as http:
        assert held(http, rid) == ids
        assert http.get(f"/runs/{rid}/retention").json()["reduced"] is False

    stale = time.time() - retention_sql.CLAIM_LEASE - 1
    store = stores.open_store()
    try:
        store.db.write_sync(
            lambda conn: conn.execute(
                update(run_retention).where(run_retention.c.run_seq == seq).values(claimed_at=stale)
            )
        )
    finally:
        store.close()
    assert [r["id"] for r in reduce(stores, rules, time.time() + 2 * DAY)] == [rid]
    with api(server.url) as http:
        assert held(http, rid) == want
        assert http.get(f"/runs/{rid}/retention").json()["reduced"] is True
        # Deleting the run removes its record with the rest.
        assert http.delete(f"/runs/{rid}").status_code == 200
    store = stores.open_store()
    try:
        assert store.db.read_sync(retention_sql.record, seq) is None
    finally:
        store.close()
