"""`openruns server check`: damaged and unreferenced blobs, on both blob stores, by the CLI."""

from __future__ import annotations

import os
import time

from openruns.cli import main as openruns_main
from openruns.server.store import episodes as episodes_sql
from openruns.server.store import runs as runs_sql

from .helpers import api, create_run, episode, ndjson, upload


def _check(stores, capsys, *flags: str) -> tuple[int, list[list[str]], str]:
    status = openruns_main(["server", "check", *stores.cli_args(), *flags])
    out, err = capsys.readouterr()
    return status, [line.split("\t") for line in out.splitlines()], err


def _segment_keys(store, run_id: str) -> list[str]:
    def read(conn):
        run = runs_sql.get_run(conn, run_id)
        return [key for key, *_ in episodes_sql.segments_of(conn, run["seq"], "episodes")]

    return store.db.read_sync(read)


def test_check_lists_damaged_and_unreferenced_blobs_and_removes_the_unreferenced(
    make_server, new_stores, capsys
):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        run = create_run(http)["id"]
        for step in range(4):
            batch = ndjson([episode(i, step, 1.0) for i in range(3)])
            assert upload(http, run, "episodes", batch).status_code == 200
    status, lines, err = _check(stores, capsys)
    assert (status, lines) == (0, []) and "4 blobs" in err and "0 damaged" in err

    store, blobs = stores.open_store(), stores.open_blobs()
    missing, short, flipped, intact = _segment_keys(store, run)
    store.close()
    blobs.delete(missing)
    blobs.put_atomic(short, blobs.get(short)[:-5])
    damaged = bytearray(blobs.get(flipped))
    damaged[len(damaged) // 2] ^= 0xFF  # same size: only --verify sees it
    blobs.put_atomic(flipped, bytes(damaged))
    orphan = "runs/1/episodes/orphan.ndjson.zst"  # a crash between blob and commit
    blobs.put_atomic(orphan, b"\x28\xb5\x2f\xfd orphan")

    status, lines, err = _check(stores, capsys)
    assert status == 1
    assert sorted(lines) == sorted(
        [["damaged", missing, "missing"], ["damaged", short, lines_reason(lines, short)]]
    )
    assert "bytes where" in lines_reason(lines, short)
    assert "1 too recent to judge" in err  # the orphan is younger than a day

    status, lines, err = _check(stores, capsys, "--verify", "--min-age-hours", "0")
    assert status == 1
    found = {(kind, key) for kind, key, *_ in lines}
    assert found == {
        ("damaged", missing),
        ("damaged", short),
        ("damaged", flipped),
        ("unreferenced", orphan),
    }
    assert "--remove-unreferenced" in err

    status, lines, _ = _check(stores, capsys, "--min-age-hours", "0", "--remove-unreferenced")
    assert ["removed", orphan] in lines and status == 1  # still damaged
    assert not blobs.exists(orphan) and blobs.exists(intact) and blobs.exists(flipped)
    status, lines, _ = _check(stores, capsys, "--min-age-hours", "0")
    assert not [line for line in lines if line[0] != "damaged"]


def lines_reason(lines: list[list[str]], key: str) -> str:
    return next(line[2] for line in lines if line[1] == key)


def test_check_judges_only_blobs_older_than_the_minimum_age(tmp_path, capsys):
    """A local blob folder: the orphan's age is its file's mtime."""
    data = tmp_path / "data"
    from openruns.server.config import ServerSettings
    from openruns.server.state import open_stores

    store, blobs = open_stores(ServerSettings(data_dir=data))
    store.close()
    blobs.put_atomic("runs/9/episodes/old.ndjson.zst", b"x")
    blobs.put_atomic("runs/9/episodes/new.ndjson.zst", b"y")
    two_days_ago = time.time() - 48 * 3600
    os.utime(data / "blobs/runs/9/episodes/old.ndjson.zst", (two_days_ago, two_days_ago))
    (data / "blobs/runs/9/episodes/.new.ndjson.zst.abc.tmp").write_bytes(b"in flight")
    status = openruns_main(["server", "check", "--data-dir", str(data), "--remove-unreferenced"])
    out, err = capsys.readouterr()
    assert status == 0
    assert out.splitlines() == [
        "unreferenced\truns/9/episodes/old.ndjson.zst\t1",
        "removed\truns/9/episodes/old.ndjson.zst",
    ]
    assert "1 too recent to judge" in err
    assert blobs.exists("runs/9/episodes/new.ndjson.zst")


def test_check_says_in_one_line_when_it_cannot_open_the_stores(tmp_path, capsys):
    status = openruns_main(["server", "check", "--data-dir", str(tmp_path), "--db", "mysql://nope"])
    _, err = capsys.readouterr()
    assert status == 2 and err.count("\n") == 1 and "unsupported database" in err
