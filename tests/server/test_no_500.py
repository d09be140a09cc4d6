"""
No input gets a 500: hypothesis drives every operation of the server's own OpenAPI document
with arbitrary path values, query strings, headers and bodies (JSON, NDJSON, random bytes,
compressed or not), against a real server on loopback. Every answer must be < 500, every
error must be the JSON error body, and every status an operation answers must be one the
document lists for it (so a schema fuzzer finds no undocumented status).
"""

from __future__ import annotations

import gzip
import json
import re
from urllib.parse import quote

import httpx
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openruns.server import serve_in_thread
from openruns.server.store import keys as key_sql

from .helpers import api, create_run, episode, metric_rows, ndjson, upload

METHODS = ("get", "post", "patch", "put", "delete")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40
)


def _dumps(value) -> bytes:
    # The standard library, not orjson: integers beyond 64 bits are valid JSON, and must be
    # rejected by the server, not by the test.
    return json.dumps(value).encode()


@st.composite
def bodies(draw, known: dict):
    kind = draw(st.sampled_from(["none", "json", "object", "ndjson", "metrics", "bytes", "run"]))
    if kind == "none":
        return b""
    if kind == "json":
        data = _dumps(draw(json_values))
    elif kind == "object":
        fields = {
            "kind": st.sampled_from(["eval", "train", "x"]),
            "status": st.sampled_from(["completed", "failed", "running", "?"]),
            "id": st.text(max_size=70),
            "tags": json_values,
            "summary": json_values,
            "losses": json_values,
            "config": json_values,
            "description": json_values,
        }
        chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=5))
        data = _dumps({k: draw(fields[k]) for k in chosen})
    elif kind == "ndjson":
        lines = draw(st.lists(json_values, max_size=5))
        data = b"\n".join(_dumps(v) for v in lines)
    elif kind == "metrics":
        rows = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "step": json_scalars,
                        "values": st.dictionaries(st.text(max_size=5), json_scalars),
                    }
                ),
                max_size=5,
            )
        )
        data = b"\n".join(_dumps(r) for r in rows)
    elif kind == "run":
        data = _dumps({"kind": "eval", "id": draw(st.sampled_from(known["runs"]))})
    else:
        data = draw(st.binary(max_size=200))
    compression = draw(st.sampled_from(["", "", "zstd", "gzip"]))
    if compression == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    elif compression == "gzip":
        data = gzip.compress(data)
    return data


@st.composite
def requests(draw, operations: list, known: dict):
    documented, template, params = draw(st.sampled_from(operations))
    method = draw(st.sampled_from([documented, documented, *METHODS]))

    def fill(match: re.Match) -> str:
        name = match.group(1).split(":")[0]
        pool = known["episodes"] if name == "episode_id" else known["runs"]
        # "." and ".." are dot segments, not ids: the client resolves them away (RFC 3986), so
        # `PATCH /runs/.` is `PATCH /runs/`, another operation (a 405 no run's answer lists).
        text = st.text(min_size=1, max_size=30).filter(lambda v: v not in (".", ".."))
        value = draw(st.sampled_from(pool) | text)
        return quote(value, safe="")

    path = re.sub(r"\{([^}]+)\}", fill, template)
    query = {}
    for name in draw(st.lists(st.sampled_from(params), unique=True)) if params else []:
        query[name] = draw(
            st.text(max_size=20).map(str)
            | st.integers(-(2**70), 2**70).map(str)
            | st.sampled_from(["true", "false", "reward", "-reward", "traces", "0"])
        )
    headers = {}
    names = ["Content-Encoding", "Idempotency-Key", "X-Openruns-Stream", "Content-Type"]
    for name in draw(st.lists(st.sampled_from(names), unique=True)):
        headers[name] = draw(
            header_text | st.sampled_from(["zstd", "gzip", "identity", "application/json"])
        )
    if known["tokens"]:  # mostly a valid key or run token, sometimes garbage
        headers["Authorization"] = draw(
            st.sampled_from(known["tokens"])
            | st.sampled_from(known["tokens"])
            | header_text.map(lambda t: f"Bearer {t}")
            | st.sampled_from(["Bearer orr_" + "0" * 64 + "_fuzz-0", "Basic eA=="])
        )
    return method.upper(), template, path, query, headers, draw(bodies(known))


@pytest.fixture(scope="module", params=["auth-off", "auth-on"])
def target(request, backend, stores_factory, tmp_path_factory):
    stores = stores_factory.new(backend, tmp_path_factory.mktemp(request.param))
    key = None
    if request.param == "auth-on":
        store = stores.open_store()
        key = store.db.write_sync(key_sql.create_key, "fuzz")[1]
        store.close()
    server = serve_in_thread(**stores.settings, auth=request.param == "auth-on")
    with api(server.url, key) as http:
        created = [create_run(http, id=f"fuzz-{i}") for i in range(2)]
        runs = [r["id"] for r in created]
        upload(http, runs[0], "metrics", metric_rows(range(50), a=1.0))
        upload(http, runs[0], "episodes", ndjson([episode(i, 0, 1.0) for i in range(3)]))
        spec = http.get("/openapi.json").json()
    operations = []
    documented = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            params = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
            operations.append((method, path, params))
            documented[(method.upper(), path)] = set(op["responses"])
    operations.append(("get", "/nope/{run_id}", []))
    tokens = [f"Bearer {key}", f"Bearer {created[0]['token']}"] if key else []
    known = {
        "runs": runs,
        "episodes": ["ep-0-0", "ep-0-1"],
        "tokens": tokens,
        "documented": documented,
    }
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http, operations, known
    server.stop()


def test_the_openapi_document_lists_every_route(target):
    _, operations, _ = target
    paths = {path for _, path, _ in operations}
    assert "/api/v1/runs/{run_id}/metrics" in paths
    assert "/api/v1/runs/{run_id}/export/{name}" in paths
    assert len(operations) >= 16


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_input_gets_a_500(target, data):
    http, operations, known = target
    method, template, path, query, headers, body = data.draw(requests(operations, known))
    response = http.request(method, path, params=query, headers=headers, content=body)
    assert response.status_code < 500, (method, path, query, headers, body, response.text)
    if response.status_code >= 400 and path.startswith("/api/v1"):
        error = response.json()["error"]
        assert error["code"] and error["message"]
    listed = known["documented"].get((method, template))
    if listed is not None:  # an operation of the document: its answer must be listed
        assert str(response.status_code) in listed, (method, template, response.text, listed)
