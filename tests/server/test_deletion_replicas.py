"""
Deleting a run with two replicas sharing one PostgreSQL database and one bucket (issue 22):
the same deletion raced on both deletes once (200, then 404), reads of the run on the other
replica meanwhile get their data or a 404/410 (never a 500), an upload after it stores
nothing, and the bucket keeps no blob of the run.
"""

from __future__ import annotations

import threading

import httpx

from .helpers import api, create_run, upload
from .test_deletion import blob_keys, fill, ndjson, rows_left, seq_of
from .test_replicas import race, replicas, shared_stores  # noqa: F401 (fixtures)


def test_a_deletion_raced_on_two_replicas_while_the_other_reads(replicas, shared_stores):  # noqa: F811
    a, b = replicas
    with api(a.url) as ha, api(b.url) as hb:
        made = create_run(ha)
        rid = made["id"]
        fill(ha, rid, steps=6)
        kept = create_run(hb)["id"]
        fill(hb, kept, steps=1)
        seq = seq_of(shared_stores, rid)

        seen: list[int] = []
        stop = threading.Event()

        def read() -> None:
            with httpx.Client(base_url=b.url + "/api/v1", timeout=60) as reader:
                while not stop.is_set():
                    for path in ("", "/metrics?keys=loss", "/episodes", "/episodes/ep-3-1"):
                        seen.append(reader.get(f"/runs/{rid}{path}").status_code)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            answers = race([ha, hb], lambda h: h.delete(f"/runs/{rid}"))
        finally:
            stop.set()
            reader.join()
        assert sorted(r.status_code for r in answers) == [200, 404], [r.text for r in answers]
        assert set(seen) <= {200, 404, 410} and seen, sorted(set(seen))

        for h in (ha, hb):
            assert h.get(f"/runs/{rid}").status_code == 404
            assert h.get(f"/runs/{kept}").status_code == 200
        with api(b.url, made["token"]) as writer:
            late = ndjson([{"step": 9, "ts": 1.0e9, "values": {"loss": 0.1}}])
            assert upload(writer, rid, "metrics", late).status_code == 404
    assert set(rows_left(shared_stores, seq).values()) == {0}
    keys = blob_keys(shared_stores)
    assert not [k for k in keys if k.startswith(f"runs/{seq}/")]
    assert [k for k in keys if k.startswith(f"runs/{seq_of(shared_stores, kept)}/")]
