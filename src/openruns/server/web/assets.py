"""
Static assets of the dashboard, all from installed packages (the dashboard works air-gapped):

- our own CSS and JavaScript, package data of this module (`web/static/`), sent with
  `Cache-Control: no-cache` and an ETag, so a browser revalidates (a 304) and an upgrade shows
  at once;
- Plotly's bundle, `plotly.min.js` from the data of the installed `plotly` package (nothing is
  copied into this repository), at a URL that names the package version, so it is cached for a
  year;
- the Pygments stylesheet of the config view, generated.

Each body is read and gzipped once, on first request (Plotly's 4.8 MB bundle is ~1.4 MB
gzipped), and answered from memory after that.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..errors import not_found
from .highlight import stylesheet

__all__ = ["PLOTLY_URL", "router"]

router = APIRouter(include_in_schema=False)

_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_YEAR = "public, max-age=31536000, immutable"


def _plotly_version() -> str:
    try:
        return importlib.metadata.version("plotly")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


PLOTLY_URL = f"/static/vendor/plotly-{_plotly_version()}.min.js"


@dataclass(frozen=True)
class _Asset:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


_cache: dict[str, _Asset] = {}
_lock = threading.Lock()


def _load(name: str, read: Callable[[], bytes], media_type: str) -> _Asset:
    with _lock:
        if name not in _cache:
            body = read()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            _cache[name] = _Asset(body, gzip.compress(body, 6, mtime=0), media_type, etag)
        return _cache[name]


def _own_file(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _plotly_bundle() -> bytes:
    # find_spec locates the package without importing plotly (a heavy import).
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("plotly")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path.read_bytes()


def _respond(request: Request, asset: _Asset, cache_control: str) -> Response:
    headers = {"Cache-Control": cache_control, "ETag": asset.etag, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get(PLOTLY_URL)
async def plotly_js(request: Request) -> Response:
    try:
        asset = await run_in_threadpool(_load, "plotly", _plotly_bundle, _TYPES[".js"])
    except FileNotFoundError as exc:
        raise not_found(
            "plotly is not installed; install the server extra: pip install 'openruns[server]'"
        ) from exc
    return _respond(request, asset, _YEAR)


@router.get("/static/pygments.css")
async def pygments_css(request: Request) -> Response:
    asset = _load("pygments.css", lambda: stylesheet().encode(), _TYPES[".css"])
    return _respond(request, asset, "no-cache")


@router.get("/static/{name}")
async def own_asset(name: str, request: Request) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    # Only flat names of our own kinds: no paths, so nothing outside static/ is reachable.
    if suffix not in _TYPES or "/" in name or "\\" in name or name.startswith("."):
        raise not_found(f"no asset {name!r}")
    try:
        asset = await run_in_threadpool(_load, name, lambda: _own_file(name), _TYPES[suffix])
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise not_found(f"no asset {name!r}") from exc
    return _respond(request, asset, "no-cache")
