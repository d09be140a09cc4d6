"""
The dashboard's pages. Each is a static shell (templates/base.html around one page template)
whose script reads the JSON API (/api/v1) with the browser's credentials, so a page holds no
data of its own and shows no more than the API would to the same caller:

    /                                  runs: filter, search, pages of 50
    /runs/{run_id}                     one run: header, live charts, steps, config, summary
    /runs/{run_id}/steps/{step}        the episodes of one step: previews, reward histogram
    /runs/{run_id}/episodes/{id}       one record as chats (any common shape), prev/next
    /runs/{run_id}/search?q=...        full-text search over the run's rollouts
    /compare?runs=a,b                  several runs' series overlaid
    /compare/episodes?run_a=&a=&...    two records side by side
    /alerts                            alert rules (switched on and off) and the delivery log
    /signin?next=/path                 paste an API key once (auth on): a session cookie

Any other address a browser asks for (Accept: text/html) answers an HTML 404 page,
`not_found_page`; the API's (/api/...) stay JSON (issue 24).

Path parameters are never written into the HTML: the scripts read them from the location.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from string import Template

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from .assets import (
    PLOTLY_CSS_URL,
    PLOTLY_URL,
    UPLOT_CSS_URL,
    UPLOT_JS_URL,
    plotly_self_styled_ids,
)

__all__ = ["not_found_page", "router"]

router = APIRouter(include_in_schema=False)

# page -> (title, its charts: "uplot" (the metric charts of the run and compare pages: uPlot's
# 51 kB build, run before the page's script), "plotly" (the step page's histogram: the page
# loads Plotly's bundle after its table, step.js loadPlotly), or None)
_PAGES = {
    "runs": ("Runs", None),
    "run": ("Run", "uplot"),
    "step": ("Step", "plotly"),
    "episode": ("Episode", None),
    "search": ("Search", None),
    "compare": ("Compare runs", "uplot"),
    "pair": ("Side by side", None),
    "alerts": ("Alerts", None),
    "signin": ("Sign in", None),
    "notfound": ("Not found", None),
}
_SCRIPTLESS = {"notfound"}


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text("utf-8")


_IMPORT = re.compile(r'^(?:import|export)\b[^;]*?from "\./([\w-]+\.js)";', re.M | re.S)


def _modules(script: str) -> list[str]:
    """The modules `script` (a file of static/) imports, directly or not, in first-seen order:
    the page names them all at once (<link rel=modulepreload>), so the browser fetches them
    side by side instead of one import level after another (three levels on the run page, each
    a revalidation round trip)."""
    static = resources.files(__package__).joinpath("static")
    seen: list[str] = []
    todo = [script]
    while todo:
        text = static.joinpath(todo.pop(0)).read_text("utf-8")
        for name in _IMPORT.findall(text):
            if name not in seen and name != script:
                seen.append(name)
                todo.append(name)
    return seen


@cache
def render(page: str) -> str:
    title, charts = _PAGES[page]
    scripts = ""
    if charts == "uplot":
        # defer: it runs before the page's module script (also deferred), in document order.
        scripts = (
            f'<link rel="stylesheet" href="{UPLOT_CSS_URL}">\n'
            f'<script defer src="{UPLOT_JS_URL}"></script>\n'
        )
    elif charts == "plotly":
        # Plotly's styles as a stylesheet: the element id and class tell Plotly not to inject
        # them inline, and empty elements stand where bundled modules would add their own
        # <style> (the Content-Security-Policy allows no inline style; see assets.py). The
        # bundle itself (1.5 MB) is named here and fetched by the page after its table.
        scripts = (
            f'<link id="plotly.js-style-global" class="no-inline-styles" rel="stylesheet" '
            f'href="{PLOTLY_CSS_URL}">\n'
            + "".join(f'<template id="{i}"></template>\n' for i in plotly_self_styled_ids())
            + f'<meta name="plotly" content="{PLOTLY_URL}">\n'
        )
    if page not in _SCRIPTLESS:
        scripts += "".join(
            f'<link rel="modulepreload" href="/static/{name}">\n' for name in _modules(f"{page}.js")
        )
        scripts += f'<script type="module" src="/static/{page}.js"></script>'
    return Template(_template("base.html")).substitute(
        title=title, page=page, body=_template(f"{page}.html"), scripts=scripts
    )


def _page(page: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(render(page), status, headers={"Cache-Control": "no-cache"})


def not_found_page(request: Request) -> HTMLResponse | None:
    """The 404 of an address that is no page, for a browser: an HTML page with the way back.
    None for the API (/api/...) and for a client that does not ask for HTML: they get the
    JSON error."""
    if request.url.path.startswith("/api/"):
        return None
    if "text/html" not in request.headers.get("accept", ""):
        return None
    return _page("notfound", 404)


@router.get("/")
async def runs_page() -> HTMLResponse:
    return _page("runs")


@router.get("/runs/{run_id}")
async def run_page(run_id: str) -> HTMLResponse:
    return _page("run")


@router.get("/runs/{run_id}/steps/{step}")
async def step_page(run_id: str, step: int) -> HTMLResponse:
    return _page("step")


@router.get("/runs/{run_id}/episodes/{episode_id:path}")  # ids may hold "/" (gsm8k/12)
async def episode_page(run_id: str, episode_id: str) -> HTMLResponse:
    return _page("episode")


@router.get("/runs/{run_id}/search")
async def search_page(run_id: str) -> HTMLResponse:
    return _page("search")


@router.get("/compare")
async def compare_page() -> HTMLResponse:
    return _page("compare")


@router.get("/compare/episodes")
async def pair_page() -> HTMLResponse:
    return _page("pair")


@router.get("/alerts")
async def alerts_page() -> HTMLResponse:
    return _page("alerts")


@router.get("/signin")
async def signin_page() -> HTMLResponse:
    return _page("signin")
