"""
The run's config, exactly as launched, syntax-highlighted on the server with Pygments (installed
with rich), so the browser needs no highlighter of its own.

    GET /ui/runs/{run_id}/config  ->  an HTML fragment, or 204 when the run has no config

It reads the run through the same authentication and run check as the API, so it shows no
more than `GET /api/v1/runs/{run_id}` would.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import JsonLexer, TextLexer, TOMLLexer, YamlLexer
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, Response

from ..routes.deps import Caller, State, readable_run

__all__ = ["render_config", "router", "stylesheet"]

router = APIRouter(include_in_schema=False)

_LEXERS: dict[str, type[Lexer]] = {
    "toml": TOMLLexer,
    "json": JsonLexer,
    "yaml": YamlLexer,
    "text": TextLexer,
}
_CSS_CLASS = "hl"


def _formatter() -> HtmlFormatter[str]:
    return HtmlFormatter(cssclass=_CSS_CLASS, style="vs", wrapcode=True)


def stylesheet() -> str:
    """The token colours, scoped to the config view (Pygments also emits rules for every
    `pre` and for line numbers; those are left out)."""
    # types-pygments leaves get_style_defs unannotated (it returns str).
    css: str = _formatter().get_style_defs(f".{_CSS_CLASS}")  # type: ignore[no-untyped-call]
    rules = css.splitlines()
    return "\n".join(r for r in rules if r.startswith(f".{_CSS_CLASS} ")) + "\n"


def render_config(config: dict[str, Any]) -> str:
    """HTML of a stored config ({format, text, filename?}); the text is kept byte for byte
    (no stripped or added newlines), unknown formats are shown as plain text."""
    lexer_type = _LEXERS.get(str(config.get("format")), TextLexer)
    lexer = lexer_type(stripnl=False, stripall=False, ensurenl=False)
    return highlight(str(config.get("text", "")), lexer, _formatter())


@router.get("/ui/runs/{run_id}/config")
async def config_fragment(run_id: str, state: State, caller: Caller) -> Response:
    run = await readable_run(state, caller, run_id)
    config = run["config"]
    if not config:
        return Response(status_code=204)
    html = await run_in_threadpool(render_config, config)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})
