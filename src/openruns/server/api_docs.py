"""
The interactive API docs at /api/v1/docs: Swagger UI, as FastAPI serves it, but with no inline
script, so the page keeps a strict Content-Security-Policy.

Swagger UI itself is not installed with the server: the page loads one pinned release from the
jsDelivr CDN, with Subresource Integrity hashes, so the browser runs those exact bytes or
nothing. That CDN is the page's one exception to "own origin only" (it is a page for people
reading the API, not the dashboard); air-gapped, the document itself is at
/api/v1/openapi.json. The page's own script (init.js) is served from this origin.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import HTMLResponse, Response

__all__ = ["DOCS_CSP", "router"]

router = APIRouter(include_in_schema=False)

_CDN = "https://cdn.jsdelivr.net"
_SWAGGER = f"{_CDN}/npm/swagger-ui-dist@5.35.0"
# sha384 of swagger-ui-dist 5.35.0's files, as published on npm (`npm pack`).
_BUNDLE_SRI = "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9"
_CSS_SRI = "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I"
DOCS_CSP = (
    f"default-src 'none'; script-src 'self' {_CDN}; style-src {_CDN}; "
    f"img-src 'self' data: {_CDN}; font-src {_CDN}; connect-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

_PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>openruns API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{_SWAGGER}/swagger-ui.css" integrity="{_CSS_SRI}"
  crossorigin="anonymous">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{_SWAGGER}/swagger-ui-bundle.js" integrity="{_BUNDLE_SRI}"
  crossorigin="anonymous"></script>
<script src="/api/v1/docs/init.js"></script>
</body>
</html>
"""

_INIT = """SwaggerUIBundle({
  url: "/api/v1/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""


@router.get("/api/v1/docs")
async def docs() -> HTMLResponse:
    return HTMLResponse(_PAGE, headers={"Content-Security-Policy": DOCS_CSP})


@router.get("/api/v1/docs/init.js")
async def docs_init() -> Response:
    return Response(_INIT, media_type="text/javascript; charset=utf-8")
