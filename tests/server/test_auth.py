"""Auth: API keys per team (404 across teams), per-run tokens, rate limits, safe binding."""

from __future__ import annotations

from openruns.cli import main as openruns_main

from .helpers import api, create_run, error_of, metric_rows, new_key, upload


def test_a_key_sees_only_its_team(teams):
    server, keys, _ = teams
    with api(server.url, keys["red"]) as red, api(server.url, keys["blue"]) as blue:
        mine = create_run(red)
        assert mine["team_id"] == "red"
        rid = mine["id"]
        assert red.get(f"/runs/{rid}").status_code == 200
        for response in (
            blue.get(f"/runs/{rid}"),
            blue.patch(f"/runs/{rid}", json={"tags": ["x"]}),
            blue.post(f"/runs/{rid}/finish", json={"status": "failed"}),
            upload(blue, rid, "metrics", metric_rows([0], a=1)),
            blue.get(f"/runs/{rid}/episodes"),
        ):
            assert error_of(response)[:2] == (404, "not_found")
        assert [r["id"] for r in red.get("/runs").json()["items"]] == [rid]
        assert blue.get("/runs").json()["items"] == []
        # Ids are per team: the same client-chosen id is blue's own run, red's is untouched.
        theirs = blue.post("/runs", json={"id": rid, "kind": "eval"})
        assert theirs.status_code == 201 and theirs.json()["team_id"] == "blue"
        assert red.get(f"/runs/{rid}").json()["kind"] == mine["kind"] == "train"
        other_team = red.post("/runs", json={"kind": "eval", "team_id": "blue"})
        assert other_team.status_code == 403


def test_missing_bad_and_revoked_keys_are_401(teams, capsys):
    server, keys, data = teams
    with api(server.url) as anonymous:
        status, code, message = error_of(anonymous.get("/runs"))
        assert (status, code) == (401, "unauthorized") and "openruns keys create" in message
        assert anonymous.get("/health").status_code == 200
    for token in ("ork_wrong", "orr_" + "0" * 64 + "_x", "Basic xyz", "nonsense"):
        with api(server.url, token) as bad:
            assert bad.get("/runs").status_code == 401
    assert openruns_main(["keys", "list", *data.db_args()]) == 0
    listing = capsys.readouterr().out
    assert "red" in listing and keys["red"] not in listing
    red_id = next(line.split("\t")[0] for line in listing.splitlines() if "\tred\t" in line)
    assert openruns_main(["keys", "revoke", red_id, *data.db_args()]) == 0
    with api(server.url, keys["red"]) as revoked:
        assert revoked.get("/runs").status_code == 401
    assert openruns_main(["keys", "revoke", red_id, *data.db_args()]) == 1


def test_a_run_token_reaches_its_run_only(teams):
    server, keys, _ = teams
    with api(server.url, keys["red"]) as red:
        run = create_run(red)
        other = create_run(red)["id"]
    with api(server.url, run["token"]) as token:
        rid = run["id"]
        assert upload(token, rid, "metrics", metric_rows([0, 1], a=1)).status_code == 200
        assert token.post(f"/runs/{rid}/heartbeat").json() == {"status": "running"}
        assert token.get(f"/runs/{rid}/metrics/keys").status_code == 200
        assert [r["id"] for r in token.get("/runs").json()["items"]] == [rid]
        assert error_of(token.get(f"/runs/{other}"))[:2] == (404, "not_found")
        assert error_of(upload(token, other, "metrics", metric_rows([0], a=1)))[0] == 403
        assert token.post(f"/runs/{other}/finish", json={"status": "failed"}).status_code == 403
        assert error_of(token.post("/runs", json={"kind": "eval"}))[:2] == (403, "forbidden")
        assert token.post(f"/runs/{rid}/finish", json={"status": "completed"}).status_code == 200


def test_rate_limit_answers_429_with_retry_after(make_server, new_stores, capsys):
    stores = new_stores()
    key = new_key(stores, "t", capsys)
    # A refill too slow to matter: at load 40 four requests took longer than 5 s (issue 24).
    server = make_server(stores, auth=True, rate_limit=1 / 3600, rate_burst=3)
    with api(server.url, key) as http:
        codes = [http.get("/runs").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = http.get("/runs")
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        assert limited.json()["error"]["code"] == "rate_limited"
