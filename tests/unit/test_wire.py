"""
The wire's rules without a server: `WireClient` over `httpx.MockTransport` (what a request
carries, how each answer or failure becomes an openruns error), `disposition` (retry / reject /
stop), `retrying` and `backoff_delay`, and Retry-After in seconds or as an HTTP date.
"""

from __future__ import annotations

import email.utils
import ssl
import threading
import time
from collections.abc import Callable

import httpx
import orjson
import pytest

from openruns import __version__
from openruns.errors import (
    APIError,
    APITimeoutError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PaymentRequiredError,
    RetryableAPIError,
    TLSError,
    TransportError,
    UnauthorizedError,
    error_for_status,
)
from openruns.wire import (
    MAX_RETRY_AFTER,
    Disposition,
    WireClient,
    backoff_delay,
    disposition,
    retrying,
    tls_context,
)

Handler = Callable[[httpx.Request], httpx.Response]


def _wire(handler: Handler, base_url: str = "http://runs.test", **kwargs) -> WireClient:
    return WireClient(
        base_url, "key-1", transport=httpx.MockTransport(handler), base_url_origin="X", **kwargs
    )


def _answer(status: int, body: object = None, headers: dict[str, str] | None = None) -> Handler:
    content = b"" if body is None else body if isinstance(body, bytes) else orjson.dumps(body)
    return lambda request: httpx.Response(status, content=content, headers=headers)


def _failure(status: int, retry_after: str | None = None) -> APIError:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    with pytest.raises(APIError) as raised:
        _wire(_answer(status, {"error": {"code": "c", "message": "m"}}, headers)).get_run("r")
    return raised.value


# -- what a request carries ---------------------------------------------------------------------


def test_a_request_carries_the_key_the_version_and_its_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "r1"})

    wire = _wire(handler)
    assert wire.create_run({"id": "r1", "kind": "eval"}, key="r1") == {"id": "r1"}
    request = seen[0]
    assert (request.method, str(request.url)) == ("POST", "http://runs.test/api/v1/runs")
    assert request.headers["Authorization"] == "Bearer key-1"
    assert request.headers["User-Agent"].startswith(f"openruns/{__version__} python/")
    assert request.headers["Idempotency-Key"] == "r1"
    assert request.headers["Content-Type"] == "application/json"
    assert orjson.loads(request.content) == {"id": "r1", "kind": "eval"}


def test_an_upload_is_sent_in_its_parts_with_its_length_and_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return httpx.Response(200, json={"stored": 2})

    _wire(handler).upload("run/1", "episodes", [b"head", b"frame"], key="k-7")
    request = seen[0]
    assert request.url.raw_path == b"/api/v1/runs/run%2F1/episodes"
    assert request.content == b"headframe"
    assert request.headers["Content-Length"] == "9"
    assert request.headers["Content-Encoding"] == "zstd"
    assert request.headers["Idempotency-Key"] == "k-7"


def test_a_read_leaves_out_query_values_that_are_none() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"runs": []})

    assert _wire(handler).get("/runs", {"kind": "train", "limit": 5, "q": None}) == {"runs": []}
    assert dict(seen[0].url.params) == {"kind": "train", "limit": "5"}


def test_an_empty_answer_is_an_empty_mapping_and_non_json_an_error() -> None:
    assert _wire(_answer(204)).heartbeat("r") == {}
    with pytest.raises(APIError, match="answered 200 with non-JSON") as raised:
        _wire(_answer(200, b"<html>")).get_run("r")
    assert raised.value.status_code == 200


# -- how answers become errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, BadRequestError),
        (401, UnauthorizedError),
        (402, PaymentRequiredError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (409, ConflictError),
        (413, BadRequestError),
        (415, BadRequestError),
        (422, BadRequestError),
        (429, RetryableAPIError),
        (502, RetryableAPIError),
        (503, RetryableAPIError),
        (504, RetryableAPIError),
        (507, RetryableAPIError),
        (408, APIError),
        (500, APIError),
        (418, APIError),
    ],
)
def test_each_status_becomes_its_error_with_the_servers_code_and_message(status, error) -> None:
    raised = _failure(status)
    assert type(raised) is error
    assert (raised.status_code, raised.code) == (status, "c")
    assert str(raised) == f"GET /runs/r: HTTP {status}: m"


def test_a_detail_body_or_plain_text_is_the_message() -> None:
    with pytest.raises(BadRequestError, match="HTTP 422: field x is wrong"):
        _wire(_answer(422, {"detail": "field x is wrong"})).get_run("r")
    with pytest.raises(RetryableAPIError, match="HTTP 502: upstream died"):
        _wire(_answer(502, b"upstream died")).get_run("r")


def test_a_404_where_every_server_answers_names_the_base_url_and_what_set_it() -> None:
    with pytest.raises(NotFoundError) as raised:
        _wire(_answer(404, b"nope"), base_url="http://runs.test/wrong/").health()
    message = str(raised.value)
    assert "no openruns API at this URL" in message
    assert "'http://runs.test/wrong' (set by X)" in message
    # Elsewhere a 404 is the run's: no such run, not a wrong address.
    assert "no openruns API" not in str(_failure(404))


def _raising(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def _caused(exc: Exception, cause: BaseException) -> Exception:
    exc.__cause__ = cause
    return exc


def test_no_answer_is_told_apart_refused_timed_out_tls_or_other() -> None:
    refused = _caused(httpx.ConnectError("refused"), ConnectionRefusedError(111, "refused"))
    with pytest.raises(TransportError) as raised:
        _wire(_raising(refused)).get_run("r")
    assert raised.value.refused and not isinstance(raised.value, TLSError)

    with pytest.raises(TransportError) as raised:
        _wire(_raising(httpx.RemoteProtocolError("reset"))).get_run("r")
    assert not raised.value.refused
    assert "RemoteProtocolError: reset" in str(raised.value)

    with pytest.raises(APITimeoutError, match="timed out \\(ReadTimeout\\)"):
        _wire(_raising(httpx.ReadTimeout("slow"))).get_run("r")

    handshake = _caused(httpx.ConnectError("tls"), ssl.SSLError(1, "WRONG_VERSION_NUMBER"))
    with pytest.raises(TLSError) as raised:
        _wire(_raising(handshake), base_url="https://runs.test").get_run("r")
    assert "the TLS handshake failed" in str(raised.value)
    assert "use http://runs.test" in str(raised.value)


# -- disposition: the one rule of what a failure means ------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TransportError("no answer"), Disposition.RETRY),
        (APITimeoutError("timed out"), Disposition.RETRY),
        (TLSError("handshake"), Disposition.STOP),
        (error_for_status(429, "m"), Disposition.RETRY),
        (error_for_status(502, "m"), Disposition.RETRY),
        (error_for_status(503, "m"), Disposition.RETRY),
        (error_for_status(504, "m"), Disposition.RETRY),
        (error_for_status(507, "m"), Disposition.RETRY),
        (error_for_status(408, "m"), Disposition.RETRY),
        (error_for_status(500, "m"), Disposition.RETRY),
        (error_for_status(401, "m"), Disposition.STOP),
        (error_for_status(403, "m"), Disposition.STOP),
        (error_for_status(404, "m"), Disposition.STOP),
        (error_for_status(400, "m"), Disposition.REJECT),
        (error_for_status(402, "m"), Disposition.REJECT),
        (error_for_status(409, "m"), Disposition.REJECT),
        (error_for_status(413, "m"), Disposition.REJECT),
        (error_for_status(415, "m"), Disposition.REJECT),
        (error_for_status(422, "m"), Disposition.REJECT),
        (error_for_status(418, "m"), Disposition.REJECT),
        (error_for_status(501, "m"), Disposition.REJECT),
        (ValueError("not ours"), Disposition.REJECT),
    ],
)
def test_disposition_of_every_failure(error: BaseException, expected: Disposition) -> None:
    assert disposition(error) is expected


def test_the_sdk_keeps_and_retries_what_a_full_disk_refused() -> None:
    """A 507 is transient to the SDK, like a 503: its batch is kept and retried, not rejected."""
    error = error_for_status(507, "the database is out of space", "insufficient_storage", 30)
    assert isinstance(error, RetryableAPIError) and disposition(error) is Disposition.RETRY
    assert error.retry_after == 30


# -- Retry-After --------------------------------------------------------------------------------


def _http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("0", 0.0),
        ("-4", 0.0),  # never a negative wait
        ("3600", MAX_RETRY_AFTER),  # at most a minute, whatever the server says
        (-120, 0.0),  # a date gone by: retry now
        (86400, MAX_RETRY_AFTER),  # a date tomorrow: a minute
        ("Wed, 99 Foo 20xx", None),  # not a date: as if not said
        ("soon", None),
    ],
)
def test_retry_after_in_seconds_or_as_an_http_date(
    header: str | int, seconds: float | None
) -> None:
    """`header` as text, or as an HTTP date that many seconds from now."""
    raised = _failure(503, header if isinstance(header, str) else _http_date(header))
    assert isinstance(raised, RetryableAPIError)
    assert raised.retry_after == seconds


def test_retry_after_as_a_date_a_little_ahead_is_the_seconds_until_then() -> None:
    raised = _failure(429, _http_date(40))
    assert isinstance(raised, RetryableAPIError) and raised.retry_after is not None
    # HTTP dates have whole seconds, and the clock moves on while the test runs.
    assert 0 < raised.retry_after <= 40


def test_retry_after_is_kept_only_on_the_errors_that_are_retried() -> None:
    assert not hasattr(_failure(400, "3"), "retry_after")


# -- backoff_delay and retrying -----------------------------------------------------------------


def test_backoff_doubles_from_half_a_second_with_jitter_and_is_capped() -> None:
    for _ in range(200):
        assert 0.4 <= backoff_delay(0) <= 0.6
        assert 3.2 <= backoff_delay(3) <= 4.8
        assert 24.0 <= backoff_delay(12) <= 36.0  # the cap (30 s), then the jitter
        assert 0.4 <= backoff_delay(100, cap=0.5) <= 0.6
    spread = {round(backoff_delay(2), 6) for _ in range(50)}
    assert len(spread) > 1  # jittered: clients that failed together do not retry together


def test_backoff_takes_the_servers_retry_after_as_given() -> None:
    busy = error_for_status(503, "busy", retry_after=7.0)
    assert backoff_delay(0, busy) == 7.0 and backoff_delay(9, busy, cap=0.5) == 7.0
    # Without Retry-After, or on an error that is not retried that way, the backoff.
    assert 0.4 <= backoff_delay(0, error_for_status(503, "busy")) <= 0.6
    assert 0.4 <= backoff_delay(0, TransportError("x")) <= 0.6


def _scripted(*answers: Handler) -> tuple[WireClient, list[httpx.Request]]:
    """A wire whose calls get `answers` in order, the last one ever after."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    return _wire(handler), seen


def test_retrying_replays_what_may_succeed_later_until_it_does() -> None:
    now = {"Retry-After": "0"}  # the server says: at once (no sleep in the test)
    wire, seen = _scripted(
        _answer(503, {"error": {"message": "busy"}}, now),
        _answer(429, b"slow down", now),
        _answer(502, b"", now),
        _answer(200, {"id": "r", "status": "running"}),
    )
    run = retrying(lambda: wire.get_run("r"), deadline=time.monotonic() + 60)
    assert run["status"] == "running" and len(seen) == 4


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, BadRequestError), (409, ConflictError), (401, UnauthorizedError), (404, NotFoundError)],
)
def test_retrying_gives_up_at_once_on_what_a_replay_cannot_mend(status, error) -> None:
    wire, seen = _scripted(_answer(status, {"error": {"message": "no"}}), _answer(200, {}))
    with pytest.raises(error):
        retrying(lambda: wire.get_run("r"), deadline=time.monotonic() + 60)
    assert len(seen) == 1


def test_retrying_raises_the_last_error_when_the_next_wait_would_pass_the_deadline() -> None:
    wire, seen = _scripted(_answer(503, b"busy", {"Retry-After": "30"}), _answer(200, {}))
    with pytest.raises(RetryableAPIError, match="HTTP 503: busy"):
        retrying(lambda: wire.get_run("r"), deadline=time.monotonic() + 5)
    assert len(seen) == 1


def test_retrying_stops_waiting_when_told_to() -> None:
    stop = threading.Event()
    stop.set()
    wire, seen = _scripted(_answer(503, b"busy", {"Retry-After": "30"}), _answer(200, {}))
    with pytest.raises(RetryableAPIError):
        retrying(lambda: wire.get_run("r"), deadline=time.monotonic() + 600, stop=stop)
    assert len(seen) == 1


def test_retrying_replays_no_answer_and_a_timeout_but_not_a_failed_handshake() -> None:
    calls: list[str] = []

    def flaky() -> str:
        calls.append("call")
        if len(calls) == 1:
            raise error_for_status(503, "busy", retry_after=0.0)
        return "ok"

    assert retrying(flaky, deadline=time.monotonic() + 60) == "ok" and len(calls) == 2

    handshake = _caused(httpx.ConnectError("tls"), ssl.SSLError(1, "CERTIFICATE_VERIFY_FAILED"))
    wire, seen = _scripted(_raising(handshake), _answer(200, {}))
    with pytest.raises(TLSError):
        retrying(lambda: wire.get_run("r"), deadline=time.monotonic() + 60)
    assert len(seen) == 1


def test_one_verifying_tls_context_a_process_and_another_when_the_trust_store_changes(
    monkeypatch, tmp_path
) -> None:
    first = tls_context()
    assert tls_context() is first  # built once: ~30 ms of CPU each
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert tls_context() is not first
