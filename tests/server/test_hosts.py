"""
With auth off, the server answers only the names it is known by and no cross-site writes
(issue 25, row 9): a DNS-rebinding page names its own host, a cross-site page sends an Origin.
SDKs, the Prime and W&B wires and curl reach the server as 127.0.0.1, localhost or [::1] and
send no Origin: they are unaffected.
"""

from __future__ import annotations

import httpx
import pytest

from openruns.server import ServerSettings
from openruns.server.hosts import HostPolicy, host_name

from ..patience import REQUEST
from .helpers import api, create_run, error_of, metric_rows, new_key


def _get(url: str, host: str, path: str = "/api/v1/runs") -> httpx.Response:
    return httpx.get(url + path, headers={"Host": host}, timeout=30)


def test_a_foreign_host_is_400_naming_it_and_loopback_names_are_answered(shared_server):
    port = shared_server.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "localhost.evil"):
        status, code, message = error_of(_get(shared_server.url, host))
        assert (status, code) == (400, "host_not_allowed"), (host, message)
        assert host in message and "--allowed-hosts" in message
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"[::1]:{port}",
        "LOCALHOST",
        "127.0.0.1",
    ):
        assert _get(shared_server.url, host).status_code == 200, host
    # A refusal before the body is read closes the connection: the body is never waited for.
    refused = httpx.post(
        shared_server.url + "/api/v1/runs",
        content=b'{"kind": "eval"}',
        headers={"Host": "evil.example", "Content-Type": "application/json"},
        timeout=30,
    )
    assert refused.status_code == 400 and refused.headers["connection"] == "close"


def test_allowed_hosts_are_answered_and_others_still_refused(make_server):
    server = make_server(allowed_hosts=frozenset({"runs.example.com", ".lab.example"}))
    for host in ("runs.example.com", "runs.example.com:443", "lab.example", "gpu1.lab.example"):
        assert _get(server.url, host).status_code == 200, host
    for host in ("example.com", "evil-lab.example", "runs.example.com.evil"):
        assert error_of(_get(server.url, host))[:2] == (400, "host_not_allowed"), host
    assert _get(server.url, "localhost").status_code == 200  # loopback stays


def test_with_auth_any_host_is_answered_unless_allowed_hosts_is_set(
    make_server, new_stores, capsys
):
    stores = new_stores()
    key = new_key(stores, "red", capsys)
    open_server = make_server(stores, auth=True)
    headers = {"Host": "runs.internal", "Authorization": f"Bearer {key}"}
    answer = httpx.get(open_server.url + "/api/v1/runs", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    strict = make_server(stores, auth=True, allowed_hosts=frozenset({"runs.internal"}))
    assert (
        httpx.get(strict.url + "/api/v1/runs", headers=headers, timeout=REQUEST).status_code == 200
    )
    headers["Host"] = "evil.example"
    assert error_of(httpx.get(strict.url + "/api/v1/runs", headers=headers, timeout=REQUEST))[
        :2
    ] == (
        400,
        "host_not_allowed",
    )


def test_a_cross_site_write_is_403_with_auth_off_and_stores_nothing(shared_server):
    with api(shared_server.url) as http:
        rid = create_run(http)["id"]
        body = metric_rows(range(3), loss=1.0)
        plain = {"Content-Type": "text/plain"}
        for browser in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
            response = http.post(f"/runs/{rid}/metrics", content=body, headers={**plain, **browser})
            status, code, message = error_of(response)
            assert (status, code) == (403, "cross_site_request"), message
            assert "auth off" in message
            status, code, _ = error_of(http.post("/runs", json={"kind": "eval"}, headers=browser))
            assert (status, code) == (403, "cross_site_request")
        assert http.get(f"/runs/{rid}/metrics/keys").json() == []
        # This server's own pages, and clients that are not browsers, write as before.
        own = {"Origin": shared_server.url, "Sec-Fetch-Site": "same-origin"}
        assert http.post(f"/runs/{rid}/metrics", content=body, headers=own).status_code == 200
        assert http.post(f"/runs/{rid}/metrics", content=body).status_code == 200
        # Reads are not writes: a page cannot read them anyway (no CORS), the Host rule holds.
        assert http.get("/runs", headers={"Origin": "https://evil.example"}).status_code == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("[::1]:8765", "::1"),
        ("LocalHost.:80", "localhost"),
        ("runs.example.com", "runs.example.com"),
    ],
)
def test_host_names_are_read_without_port_case_or_final_dot(header, name):
    assert host_name(header) == name


def test_the_host_policy_of_each_kind_of_server():
    loopback = HostPolicy(ServerSettings(host="127.0.0.1"), auth=False)
    assert loopback.allows("127.0.0.1") and loopback.allows("::1") and loopback.allows("localhost")
    assert not loopback.allows("10.0.0.5") and not loopback.allows("evil.example")
    # Listening on every address without auth (--insecure): any address literal, no names.
    exposed = HostPolicy(ServerSettings(host="0.0.0.0", insecure=True), auth=False)
    assert exposed.allows("10.0.0.5") and exposed.allows("fe80::1")
    assert not exposed.allows("evil.example")
    named = ServerSettings(host="0.0.0.0", auth=True, public_url="https://runs.example.com/")
    assert HostPolicy(named, auth=True).allows("evil.example")  # auth on: keys protect it
    strict = ServerSettings(
        host="10.0.0.5",
        auth=True,
        public_url="https://runs.example.com/",
        allowed_hosts=frozenset({"gpu.lab"}),
    )
    policy = HostPolicy(strict, auth=True)
    assert policy.allows("runs.example.com") and policy.allows("gpu.lab")
    assert policy.allows("10.0.0.5") and not policy.allows("evil.example")
    anything = ServerSettings(host="127.0.0.1", allowed_hosts=frozenset({"*"}))
    assert HostPolicy(anything, auth=False).allows("evil.example")


def test_allowed_hosts_is_a_setting_like_the_others(tmp_path):
    settings = ServerSettings.resolve(
        environ={"OPENRUNS_ALLOWED_HOSTS": "a.example, .b.example"},
        config_file=tmp_path / "none.toml",
    )
    assert settings.allowed_hosts == frozenset({"a.example", ".b.example"})
