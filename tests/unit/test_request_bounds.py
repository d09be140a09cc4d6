"""
Every request a test sends itself waits as long as `patience.REQUEST`, not httpx's 5 s default
(issue 24): at load 8 a freshly started server took more than 5 s to answer its first request,
and a test that passes alone failed with `httpx.ReadTimeout` beside a second copy of the suite.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SENDERS = {"get", "post", "put", "patch", "delete", "head", "request", "stream", "Client"}


def unbounded_calls(source: str) -> list[int]:
    """Lines of `httpx.<sender>(...)` calls that name no `timeout` (and pass no `**kwargs`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func
        if not (isinstance(target.value, ast.Name) and target.value.id == "httpx"):
            continue
        if target.attr in SENDERS and all(k.arg not in ("timeout", None) for k in node.keywords):
            lines.append(node.lineno)
    return lines


def test_the_check_finds_an_unbounded_call_and_passes_a_bounded_one():
    source = "import httpx\nhttpx.get(url)\nhttpx.post(url, timeout=60)\nhttpx.Client(**kw)\n"
    assert unbounded_calls(source) == [2]


def test_every_request_a_test_sends_has_a_bound():
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in unbounded_calls(path.read_text())
    ]
    assert found == [], "pass timeout=patience.REQUEST to: " + ", ".join(found)
