"""`openruns mcp` driven by the `mcp` package's own stdio client, as an agent's client starts
it (`python -m openruns mcp`), against the seeded server: every tool listed with a description
and a JSON schema, each called, real data back; errors as tool errors the agent reads."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openruns.mcp_server.tools import TOOL_NAMES

from .. import patience
from ..services import free_port
from .conftest import CONFIG, LONG

Call = Callable[..., Awaitable[Any]]


def drive(url: str, session: Callable[[Client, Call], Awaitable[None]]) -> None:
    """Start `python -m openruns mcp` for the server at `url` and run `session` against it;
    `call(name, **arguments)` answers a tool's JSON document, or its error text."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "openruns", "mcp"],
        env={"OPENRUNS_BASE_URL": url, "OPENRUNS_RETRY_TIMEOUT": "5"},
    )

    async def call(name: str, **arguments: Any) -> Any:
        result = await client.call_tool(name, arguments)
        [content] = result.content
        if result.is_error:
            return content.text
        document = orjson.loads(content.text)
        assert result.structured_content == document  # the same answer both ways
        return document

    async def main() -> None:
        nonlocal client
        with anyio.fail_after(patience.START + patience.EXIT):
            async with Client(params) as client:
                await session(client, call)

    client: Client
    anyio.run(main)


def test_every_tool_is_listed_and_answers_with_the_runs_data(seeded):
    rid, records = seeded.run_id, seeded.episodes

    async def session(client: Client, call: Call) -> None:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(listed) == sorted(TOOL_NAMES)
        for tool in listed.values():
            assert tool.description and tool.input_schema["type"] == "object"
            assert tool.annotations is not None and tool.annotations.read_only_hint
            described = tool.input_schema.get("properties", {}).values()
            assert all(prop.get("description") for prop in described), tool.name
        assert listed["get_run"].input_schema["required"] == ["run_id"]

        runs = await call("list_runs", tag="agents")
        assert [r["id"] for r in runs["runs"]] == [rid, seeded.other_id] and not runs["more"]
        assert runs["runs"][0]["config"] == {"format": "toml", "filename": "rl.toml"}
        page = await call("list_runs", tag="agents", limit=1)
        assert [r["id"] for r in page["runs"]] == [rid] and page["more"]

        run = (await call("get_run", run_id=rid))["run"]
        assert (run["name"], run["model"], run["config"]) == ("rl-agents", "Qwen/Qwen3-8B", CONFIG)
        assert run["summary"] == {"reward": 0.9, "loss": 0.01}

        keys = {k["label"]: k for k in (await call("list_metric_keys", run_id=rid))["keys"]}
        assert set(keys) == {"loss", "reward", "queue"}
        assert (keys["loss"]["count"], keys["queue"]["axis"]) == (100, "time")

        metrics = await call("get_metrics", run_id=rid, max_points=10)
        loss = metrics["series"]["loss"]
        assert len(loss["step"]) <= 10 and loss["step"][-1] == 99 and loss["value"][-1] == 0.01
        assert metrics["by_time"] == {"queue": {"ts": [1000000000.5], "value": [3.0]}}
        assert metrics["omitted_keys"] == 0
        reward = await call("get_metrics", run_id=rid, keys=["reward"])
        assert reward["series"] == {
            "reward": {
                "step": list(range(0, 100, 10)),
                "value": [s / 100 for s in range(0, 100, 10)],
            }
        }

        wide = await call("get_metrics", run_id=seeded.other_id)  # 25 keys
        assert sorted(wide["series"]) == [f"eval/k{k:02d}" for k in range(20)]
        assert wide["omitted_keys"] == 5 and wide["series"]["eval/k03"]["value"] == [3.0] * 3
        named = [f"eval/k{k:02d}" for k in range(25)]
        assert len((await call("get_metrics", run_id=seeded.other_id, keys=named))["series"]) == 25

        steps = await call("get_steps", run_id=rid)
        assert [(s["step"], s["count"]) for s in steps["steps"]] == [(0, 10), (1, 10), (2, 10)]
        assert steps["total"] == 3
        assert [s["step"] for s in (await call("get_steps", run_id=rid, offset=2))["steps"]] == [2]

        best = await call("list_episodes", run_id=rid, sort="-reward", limit=3)
        assert [e["id"] for e in best["episodes"]] == ["ep-29", "ep-28", "ep-27"] and best["more"]
        step1 = await call("list_episodes", run_id=rid, step=1, env="code", offset=2, limit=10)
        assert [e["id"] for e in step1["episodes"]] == ["ep-15", "ep-17", "ep-19"]
        assert not step1["more"]

        whole = await call("get_episode", run_id=rid, episode_id="ep-3")
        assert whole == {"episode": records[3], "clipped_strings": 0}
        cut = await call("get_episode", run_id=rid, episode_id="ep-7", max_string_chars=100)
        said = cut["episode"]["traces"][0]["nodes"][1]["message"]["content"]
        assert cut["clipped_strings"] == 1 and said.startswith("the sandbox timed out")
        assert said.endswith(f"... [{len(LONG) - 100} more characters]") and len(said) < 200

        hits = await call("search_episodes", run_id=rid, q='"sandbox timed out"')
        assert [h["id"] for h in hits["hits"]] == ["ep-7"] and hits["hits"][0]["snippets"]
        fine = await call("search_episodes", run_id=rid, q="fine", env="math", limit=2)
        assert len(fine["hits"]) == 2 and fine["more"]
        assert all(h["env"] == "math" for h in fine["hits"])

        tail = await call("get_logs", run_id=rid, limit=2)
        assert [line["line"] for line in tail["lines"]] == ["line 3", "line 4"]
        assert tail["totals"]["lines"] == 5 and tail["lines"][1]["stream"] == "stderr"
        head = await call("get_logs", run_id=rid, after=-1, limit=3)
        assert [line["line"] for line in head["lines"]] == ["line 0", "line 1", "line 2"]
        rest = await call("get_logs", run_id=rid, after=head["next_after"])
        assert [line["line"] for line in rest["lines"]] == ["line 3", "line 4"]
        errors = await call("get_logs", run_id=rid, stream="stderr")
        assert [line["line"] for line in errors["lines"]] == ["line 4"]

    drive(seeded.server.url, session)


def test_errors_are_tool_errors_the_agent_reads(seeded):
    async def session(client: Client, call: Call) -> None:
        assert "no run 'no-such-run'" in await call("get_run", run_id="no-such-run")
        missing = await call("get_episode", run_id=seeded.run_id, episode_id="ep-missing")
        assert "ep-missing" in missing
        assert "greater than or equal to 1" in await call("list_runs", limit=0)
        assert "Input should be 'train' or 'eval'" in await call("list_runs", kind="rl")
        assert "run_id" in await call("get_steps")  # required
        # The server still answers after the errors.
        assert (await call("get_run", run_id=seeded.run_id))["run"]["id"] == seeded.run_id

    drive(seeded.server.url, session)


def test_a_server_away_is_named_in_the_error():
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def session(client: Client, call: Call) -> None:
        error = await call("list_runs")
        assert "refused" in error and f"no answer from the openruns server at {away}" in error

    drive(away, session)


def test_docs_agents_md_lists_every_tool():
    page = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()
    documented = re.findall(r"^\| `([a-z_]+)` \|", page, re.MULTILINE)
    assert sorted(documented) == sorted(TOOL_NAMES)


def test_without_the_extra_it_says_which_to_install():
    code = (
        "import sys; sys.modules['mcp'] = None  # as if the extra were not installed\n"
        "from openruns.cli import main; raise SystemExit(main(['mcp']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=patience.EXIT
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "pip install 'openruns[mcp]'" in done.stderr and done.stderr.count("\n") == 1


def test_the_sdk_and_the_command_line_never_import_mcp():
    code = (
        "import sys, openruns, openruns.api, openruns.cli\n"
        "openruns.cli.build_parser()\n"
        "print([m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
