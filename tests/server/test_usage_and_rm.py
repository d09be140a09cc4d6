"""
`openruns runs rm` (a subprocess against a real server), `GET /api/v1/usage` and
`openruns server usage` (issue 22), on both stores.
"""

from __future__ import annotations

import orjson

from .helpers import api, create_run, episode, ndjson, upload
from .test_cli import openruns
from .test_deletion import blob_keys, fill, seq_of


def test_runs_rm_asks_unless_yes_and_deletes_everything(make_server, new_stores):
    stores = new_stores()
    server = make_server(stores)
    with api(server.url) as http:
        rid = create_run(http, name="to-go")["id"]
        fill(http, rid, steps=2)
    seq = seq_of(stores, rid)
    where = ("--base-url", server.url)

    asked = openruns("runs", "rm", rid, *where)  # no terminal to ask on: refused, kept
    assert asked.returncode == 2 and "--yes" in asked.stderr
    with api(server.url) as http:
        assert http.get(f"/runs/{rid}").status_code == 200

    done = openruns("runs", "rm", rid, "--yes", "--json", *where)
    assert done.returncode == 0, done.stderr
    assert f"deleted run {rid}" in done.stderr and "10 episodes" in done.stderr
    record = orjson.loads(done.stdout)
    assert record["id"] == rid and record["removed"]["episodes"] == 10
    assert not [k for k in blob_keys(stores) if k.startswith(f"runs/{seq}/")]

    again = openruns("runs", "rm", rid, "--yes", *where)
    assert again.returncode == 2 and "404" in again.stderr and rid in again.stderr


def test_usage_per_team_project_and_run_by_the_api_and_the_cli(teams):
    server, keys, stores = teams
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        big = create_run(red, project="alpha")["id"]
        small = create_run(red, project="beta")["id"]
        other = create_run(blue)["id"]
        fill(red, big, steps=3)
        batch = ndjson([episode(i, 0, 1.0) for i in range(2)])
        assert upload(red, small, "episodes", batch).status_code == 200
        assert upload(blue, other, "episodes", batch).status_code == 200

        found = red.get("/usage").json()
        assert [t["team_id"] for t in found["teams"]] == ["red"]  # not blue's
        runs = {r["id"]: r for r in found["runs"]}
        assert set(runs) == {big, small} and found["runs"][0]["id"] == big  # largest first
        assert runs[big]["episodes"] == 15 and runs[big]["metric_rows"] == 300
        assert runs[big]["metric_time_rows"] == 20 and runs[big]["log_lines"] == 9
        assert runs[big]["blobs"] == 3 and runs[big]["blob_bytes"] > 0
        assert runs[small]["episodes"] == 2 and runs[small]["blobs"] == 1
        projects = {p["project"]: p for p in found["projects"]}
        assert projects["alpha"]["runs"] == 1 and projects["beta"]["episodes"] == 2
        team = found["teams"][0]
        assert team["blob_bytes"] == runs[big]["blob_bytes"] + runs[small]["blob_bytes"]
        assert team["row_bytes"] > 0 and found["total"]["runs"] == 2
        only = red.get("/usage", params={"project": "beta"}).json()
        assert [r["id"] for r in only["runs"]] == [small]

        # A deleted run no longer counts.
        assert red.delete(f"/runs/{big}").status_code == 200
        assert [r["id"] for r in red.get("/usage").json()["runs"]] == [small]

    done = openruns("server", "usage", *stores.cli_args(), "--json")
    assert done.returncode == 0, done.stderr
    every = orjson.loads(done.stdout)
    assert {t["team_id"] for t in every["teams"]} == {"red", "blue"}
    assert every["total"]["runs"] == 2 and every["total"]["episodes"] == 4
    table = openruns("server", "usage", *stores.cli_args(), "--team", "blue")
    assert table.returncode == 0, table.stderr
    assert f"blue/default/{other}" in table.stdout and small not in table.stdout
    assert "1 runs" in table.stderr
