"""
Auth and the answers that are not a run's data: an openruns team key works as WANDB_API_KEY
(its team is the entity), a wrong key fails `wandb.init` within seconds with the SDK's own
error and writes nothing, an entity of another team is refused; a GraphQL operation or field
the server does not serve is a GraphQL error naming it (never a 500); overload is 429 with
Retry-After.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess

from ..patience import REQUEST
from .helpers import run_script

INIT = """
import sys, time, wandb

started = time.monotonic()
try:
    run = wandb.init(project="auth", id=sys.argv[1])
    run.log({"loss": 1.0})
    print("entity", run.entity)
    run.finish()
except Exception as exc:
    print("failed", type(exc).__module__, type(exc).__name__, exc)
    print("after", time.monotonic() - started)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """A server with auth on, and a key of each of two teams: (server, {team: key})."""
    data = tmp_path_factory.mktemp("wandb-auth") / "data"
    keys = {}
    for team in ("red", "blue"):
        made = subprocess.run(
            [sys.executable, "-m", "openruns.cli", "keys", "create", "--team", team]
            + ["--data-dir", str(data)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        keys[team] = made.stdout.strip()
    proc = ServerProcess(data, "--auth", "--rate-limit", "5", "--rate-burst", "20").start()
    yield proc, keys
    proc.stop()


def test_a_team_key_is_a_wandb_api_key_and_its_team_the_entity(auth_server, tmp_path):
    server, team_keys = auth_server
    run_id = f"a{uuid.uuid4().hex[:10]}"
    done = run_script(tmp_path, INIT, server.url, run_id, api_key=team_keys["red"])
    assert "entity red" in done.stdout
    with Client(base_url=server.url, api_key=team_keys["red"]) as red:
        run = red.run(run_id)
        assert run["team_id"] == "red" and run["status"] == "completed"
        assert [r["value"] for r in red.metrics(run_id, keys=["loss"])] == [1.0]
    with Client(base_url=server.url, api_key=team_keys["blue"]) as blue:
        assert run_id not in {r["id"] for r in blue.runs()}


def test_a_wrong_key_fails_init_within_seconds_with_the_sdks_error(auth_server, tmp_path):
    server, _ = auth_server
    run_id = f"a{uuid.uuid4().hex[:10]}"
    wrong = "ork_" + "f" * 64
    done = run_script(tmp_path, INIT, server.url, run_id, api_key=wrong, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "failed wandb.errors.errors CommError the API key is not valid" in done.stdout
    seconds = float(done.stdout.split("after")[-1])
    assert seconds < 60, done.stdout  # no retrying for minutes: a 401 is final
    answer = httpx.get(
        f"{server.url}/api/v1/runs", headers={"Authorization": "Bearer " + wrong}, timeout=REQUEST
    )
    assert answer.status_code == 401


def test_another_teams_entity_is_refused(auth_server, tmp_path):
    server, team_keys = auth_server
    done = run_script(
        tmp_path,
        INIT,
        server.url,
        f"a{uuid.uuid4().hex[:10]}",
        api_key=team_keys["red"],
        check=False,
        WANDB_ENTITY="blue",
    )
    assert done.returncode == 3
    assert "belongs to entity 'red', not 'blue'" in done.stdout


def graphql(url: str, query: str, key: str | None = None, **variables) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"query": query, "variables": variables}
    return httpx.post(f"{url}/graphql", json=body, headers=headers, timeout=30)


def test_unknown_operations_and_fields_are_graphql_errors_naming_them(server):
    answer = graphql(server.url, "mutation CreateSweep { upsertSweep(input: {}) { sweep { id } } }")
    assert answer.status_code == 200
    (error,) = answer.json()["errors"]
    assert "upsertSweep" in error["message"]
    answer = graphql(server.url, "query Q { viewer { id apiKeys { edges { node { id } } } } }")
    assert answer.status_code == 200
    assert "Cannot query field 'apiKeys' on type 'User'" in answer.json()["errors"][0]["message"]
    for body in (b"not json", b'{"query": 3}', b'{"query": "{", "variables": []}'):
        answer = httpx.post(f"{server.url}/graphql", content=body, timeout=30)
        assert answer.status_code in (200, 400), answer.text
        assert answer.json()["errors"][0]["message"]
    assert graphql(server.url, "{ viewer { entity } }").json() == {
        "data": {"viewer": {"entity": "default"}}
    }


def test_overload_is_429_with_retry_after(auth_server):
    server, team_keys = auth_server
    # 60 at once: more than the burst of 20 however slowly a loaded machine answers each.
    with ThreadPoolExecutor(30) as pool:
        answers = list(
            pool.map(
                lambda _: graphql(server.url, "{ viewer { entity } }", team_keys["blue"]), range(60)
            )
        )
    limited = [a for a in answers if a.status_code == 429]
    assert limited, [a.status_code for a in answers]
    assert {a.status_code for a in answers} == {200, 429}
    for answer in limited:
        assert int(answer.headers["Retry-After"]) >= 1
        assert "too many requests" in answer.json()["errors"][0]["message"]
