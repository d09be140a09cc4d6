"""
Which requests the server answers at all: the `Host` they name, and with auth off, their site.

A server with auth off trusts whoever can reach it, which on loopback means the local user. Two
browser tricks let a web page reach it too (issue 25):

- DNS rebinding: a page on evil.example re-points evil.example at 127.0.0.1 and reads the
  server as its own origin. Its requests name `Host: evil.example`, so only the names the
  server knows it by are answered: loopback names and addresses (`localhost`, 127.0.0.0/8,
  ::1), the address it listens on, `--public-url`'s host and `--allowed-hosts` (exact names,
  `.example.com` for a domain and its subdomains, `*` for any). Anything else is 400
  `host_not_allowed` naming the host. An IP address cannot be rebound, so a server listening
  on a non-loopback address without auth (`--insecure`) answers any address literal too.
  With auth on, a rebound page has no key to send: any host is answered unless
  `--allowed-hosts` is set, which then applies as above.
- A cross-site write: a page may POST a `text/plain` body (a "simple" request, sent without a
  CORS preflight) to the server. With auth off, every request that changes state must not come
  from another site, by the same rule as a dashboard session's writes (security.
  check_same_origin): 403 `cross_site_request`. SDKs and curl send no `Origin` and are not
  affected. With auth on, a write needs a key (a header no page can add cross-site without a
  preflight this server does not grant) or a session cookie (already checked).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import ServerSettings, is_loopback
from .errors import ApiError, bad_request
from .handlers import error_response
from .security import check_same_origin

__all__ = ["HostPolicy", "RequestGate", "host_name"]

_ANY_ADDRESS = ("0.0.0.0", "::", "")


class HostPolicy:
    """The Host names a server answers to (see the module); `allows(name)`."""

    def __init__(self, settings: ServerSettings, auth: bool):
        self.any = (auth and settings.allowed_hosts is None) or "*" in (
            settings.allowed_hosts or ()
        )
        # A server reachable from the network without auth: clients name it by any address.
        self.any_address = not auth and not is_loopback(settings.host)
        names = {"localhost"}
        if settings.host not in _ANY_ADDRESS:
            names.add(_normal(settings.host))
        if settings.public_url:
            names.add(_normal(urlsplit(settings.public_url).hostname or ""))
        self.suffixes = tuple(_normal(h) for h in settings.allowed_hosts or () if h.startswith("."))
        names.update(_normal(h) for h in settings.allowed_hosts or () if not h.startswith("."))
        self.names = frozenset(names)

    def allows(self, name: str) -> bool:
        if self.any or name in self.names or is_loopback(name):
            return True
        if any(name == s[1:] or name.endswith(s) for s in self.suffixes):
            return True
        return self.any_address and _is_address(name)


class RequestGate:
    """ASGI middleware: 400 for a Host the policy does not allow; with auth off, 403 for a
    write from another site."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, auth: bool):
        self.app = app
        self.settings = settings
        self.auth = auth
        self.policy = HostPolicy(settings, auth)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check(Request(scope))
        except ApiError as exc:
            await error_response(exc.status_code, exc.code, exc.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, request: Request) -> None:
        host = request.headers.get("host")
        # No Host at all: HTTP/1.0, never a browser (h11 refuses an HTTP/1.1 request without).
        if host is not None and not self.policy.allows(host_name(host)):
            raise bad_request(
                "host_not_allowed",
                f"this server does not answer to the host {host[:200]!r} (a page on another "
                "site may be using a DNS name that points here); if that is this server's "
                "name, start it with --allowed-hosts naming it (OPENRUNS_ALLOWED_HOSTS)",
            )
        if not self.auth:
            check_same_origin(
                request,
                self.settings,
                "with auth off, only this server's own pages and clients that are not "
                "browsers (SDKs, curl) may change things",
            )


def host_name(host: str) -> str:
    """The name in a Host header: without the port and brackets, lowercase, no final dot."""
    host = host.strip()
    if host.startswith("["):  # [::1]:8765
        return host[1 : host.find("]")].lower() if "]" in host else host.lower()
    name, _, _ = host.partition(":")
    return _normal(name)


def _normal(name: str) -> str:
    return name.strip().strip("[]").lower().rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
