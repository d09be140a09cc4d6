"""
The browser-facing defences: response headers on every answer, the same-origin rule for
requests a dashboard session makes, and which proxy headers are believed.

- Every response carries `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
  `X-Frame-Options: DENY` and a Content-Security-Policy: pages (text/html) may load scripts,
  styles, fonts and fetches from this origin only, never inline script or `eval`, and may not
  be framed (`frame-ancestors 'none'`); anything else (JSON, exports) gets `default-src 'none'`.
  A route that sets its own policy keeps it (the API docs page, api_docs.py).
- A request authenticated by the session cookie that changes state (anything but GET, HEAD,
  OPTIONS) must come from this origin: its `Origin` header, when sent, must be this server's
  origin (or `--public-url`'s); without one, `Sec-Fetch-Site` when sent must be same-origin.
  Browsers send at least one of them; a client that sends neither is not a browser, so no other
  site can be riding its cookie. The cookie is SameSite=Strict as well: two independent rules.
- X-Forwarded-Proto / X-Forwarded-For are believed only from `--trusted-proxies` (uvicorn's
  ProxyHeadersMiddleware), so a direct client cannot claim HTTPS or another address.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .config import ServerSettings
from .errors import ApiError

__all__ = [
    "API_CSP",
    "PAGE_CSP",
    "SecurityHeaders",
    "check_same_origin",
    "client_address",
    "install_security",
    "is_https",
]

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_FIXED = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeaders:
    """ASGI middleware adding the headers above to every HTTP response."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in _FIXED if name not in present]
                if b"content-security-policy" not in present:
                    html = any(
                        name.lower() == b"content-type" and value.startswith(b"text/html")
                        for name, value in headers
                    )
                    headers.append(
                        (b"content-security-policy", (PAGE_CSP if html else API_CSP).encode())
                    )
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_security(app: FastAPI, settings: ServerSettings) -> None:
    """Add the headers middleware and, when proxies are trusted, uvicorn's proxy-header
    handling outside it (so the scheme and client address are known to everything inside)."""
    app.add_middleware(SecurityHeaders)
    if settings.trusted_proxies:
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        app.add_middleware(
            ProxyHeadersMiddleware,
            trusted_hosts=sorted(settings.trusted_proxies),
        )


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def check_same_origin(
    request: Request,
    settings: ServerSettings,
    rule: str = "a dashboard session may only change things from this server's own pages",
) -> None:
    """403 `cross_site_request` when a browser says the request comes from another site;
    `rule` ends the message (what may change things instead)."""
    if request.method in _SAFE_METHODS:
        return
    origin = request.headers.get("origin")
    if origin is not None:
        if origin.rstrip("/") not in _own_origins(request, settings):
            raise _cross_site(f"this request comes from {origin[:200]!r}, another site", rule)
        return
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        raise _cross_site(f"the browser says this request is {fetch_site[:40]!r}", rule)


def _own_origins(request: Request, settings: ServerSettings) -> set[str]:
    origins = set()
    host = request.headers.get("host")
    if host:
        origins.add(f"{request.url.scheme}://{host}")
    if settings.public_url:
        parts = urlsplit(settings.public_url)
        origins.add(f"{parts.scheme}://{parts.netloc}")
    return origins


def _cross_site(reason: str, rule: str) -> ApiError:
    return ApiError(403, "cross_site_request", f"{reason}: {rule}")
