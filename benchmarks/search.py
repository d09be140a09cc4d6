"""
Full-text search over a run's rollouts on the embedded store (SQLite FTS5), at scale:

1. build N episodes of production-shaped text (multi-turn chats: a system prompt, a question,
   assistant turns of reasoning with Zipf-distributed words, tool calls and tool results,
   sometimes an error; lognormal length, median ~10 KB of text) as the server stores them
   (segments of 1 MiB zstd frames, index rows, through the server's own segment and store
   code), into one run;
2. let the search indexer catch up, timing it (records/s and MB/s of text);
3. start `openruns server` on that data and time queries over HTTP (`GET /runs/{id}/search`,
   20 hits with their snippets, as the search page asks), each REPEAT times, warm.

    uv run python benchmarks/search.py                      # 100,000 episodes: ~15 minutes
    uv run python benchmarks/search.py --episodes 5000      # a smoke run
    uv run python benchmarks/search.py --runs 100           # the episodes spread over 100
                                                            # runs of one project, and the
                                                            # same queries across them
                                                            # (GET /search?project=, issue 22)

Results go in docs/benchmarks.md, section "Dashboard: search".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy
import orjson

from openruns.server.config import ServerSettings
from openruns.server.search_indexer import index_round
from openruns.server.segments import build_segment
from openruns.server.state import ServerState

SRC = str(Path(__file__).resolve().parents[1] / "src")
MiB = 1024 * 1024
VOCABULARY = 60_000
SENTENCES = 200_000
REPEAT = 15
PROJECT = "search-bench"
BATCH = 500  # episodes per segment (an upload of the SDK carries a few hundred)

# Words planted at known rates, to query at known selectivity.
RARE = "quixotically"  # 0.1 % of episodes
ERROR = "ZeroDivisionError"  # 1 %
PHRASE = "the sandbox timed out"  # 2 %


def make_sentences(rng: numpy.random.Generator) -> list[str]:
    """A pool of sentences of Zipf-distributed made-up words (s = 1.1, as natural text)."""
    letters = numpy.array(list("etaoinshrdlucmfwypvbgkqjxz"))
    lengths = rng.integers(2, 11, VOCABULARY)
    words = ["".join(rng.choice(letters, n)) for n in lengths]
    ranks = numpy.arange(1, VOCABULARY + 1)
    weights = 1.0 / ranks**1.1
    cdf = numpy.cumsum(weights / weights.sum())
    sizes = rng.integers(6, 30, SENTENCES)
    picks = numpy.searchsorted(cdf, rng.random(int(sizes.sum())))
    out, at = [], 0
    for size in sizes:
        chunk = picks[at : at + size]
        at += size
        out.append(" ".join(words[i] for i in chunk).capitalize() + ".")
    return out


def make_episode(i: int, rng: numpy.random.Generator, sentences: list[str]) -> dict:
    """One episode of production-shaped text, its size lognormal (median ~10 KB of text)."""
    budget = int(rng.lognormal(numpy.log(10_000), 0.6))
    picks = iter(rng.integers(0, len(sentences), budget // 20 + 40))

    def text(chars: int) -> str:
        out, n = [], 0
        while n < chars:
            s = sentences[next(picks)]
            out.append(s)
            n += len(s) + 1
        return " ".join(out)

    turns = int(rng.integers(2, 7))
    per_turn = max(200, budget // (turns * 2))
    messages = [
        {"role": "system", "content": "You are a careful agent. Use the tools. " + text(300)},
        {"role": "user", "content": text(400)},
    ]
    for t in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": text(per_turn),
                "tool_calls": [
                    {
                        "id": f"call_{t}",
                        "type": "function",
                        "function": {
                            "name": "python",
                            "arguments": orjson.dumps({"code": text(150)}).decode(),
                        },
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{t}", "content": text(per_turn // 2)}
        )
    messages.append({"role": "assistant", "content": text(per_turn)})
    roll = rng.random()
    if roll < 0.001:
        messages[-1]["content"] += f" It went {RARE} well."
    errors = []
    if rng.random() < 0.01:
        errors.append({"type": ERROR, "message": "division by zero", "traceback": text(300)})
    if rng.random() < 0.02:
        messages[-2]["content"] += f" Then {PHRASE} after 30 s."
    nodes = [{"message": m, "sampled": m["role"] == "assistant"} for m in messages]
    step = i // 256
    return {
        "id": f"ep-{i:07d}",
        "env": {"id": ["math", "code", "search", "swe"][i % 4]},
        "run": {
            "type": "train",
            "work": {"type": "eval" if i % 10 == 0 else "train", "step": step},
        },
        "ok": not errors,
        "errors": errors,
        "traces": [
            {"nodes": nodes, "reward": float(rng.random()), "num_total_tokens": budget // 4}
        ],
    }


def build(data_dir: Path, episodes: int, runs: int = 1) -> tuple[list[str], dict]:
    settings = ServerSettings(data_dir=data_dir)
    state = ServerState.open(settings)
    figures: dict = {}
    try:
        rng = numpy.random.default_rng(14)
        started = time.perf_counter()
        sentences = make_sentences(rng)
        made = [
            asyncio.run(
                state.store.create_run(
                    "default",
                    {"id": f"search-bench-{i}", "kind": "train", "project": PROJECT},
                    None,
                )
            )[0]
            for i in range(runs)
        ]
        text_bytes = json_bytes = 0
        for first in range(0, episodes, BATCH):
            records = [
                make_episode(i, rng, sentences) for i in range(first, min(episodes, first + BATCH))
            ]
            data = b"".join(orjson.dumps(r) + b"\n" for r in records)
            json_bytes += len(data)
            text_bytes += sum(
                len(n["message"]["content"]) for r in records for n in r["traces"][0]["nodes"]
            )
            segment = build_segment(data)
            run = made[(first // BATCH) % runs]
            key = f"runs/{run['seq']}/episodes/{first:08d}.ndjson.zst"
            state.blobs.put_atomic(key, segment.blob)
            asyncio.run(
                state.store.commit_segment(
                    run["seq"], key, "episodes", key, len(segment.blob), segment.rows
                )
            )
        figures["build_s"] = time.perf_counter() - started
        figures["json_mb"] = json_bytes / MiB
        figures["text_mb"] = text_bytes / MiB
        started = time.perf_counter()
        indexed = 0
        while n := asyncio.run(index_round(state)):
            indexed += n
        figures["index_s"] = time.perf_counter() - started
        figures["indexed"] = indexed
    finally:
        state.close()
    figures["db_mb"] = (data_dir / "openruns.db").stat().st_size / MiB
    return [run["id"] for run in made], figures


def start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = data_dir.with_suffix(".log")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "openruns.cli",
                "server",
                "-p",
                "0",
                "--data-dir",
                str(data_dir),
            ],
            env={**os.environ, "PYTHONPATH": SRC},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if "listening on" in line:
                return proc, line.split("listening on ")[1].split()[0]
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(log.read_text())


QUERIES = {
    "rare word (0.1 %)": {"q": RARE},
    "error type (1 %)": {"q": ERROR},
    "phrase (2 %)": {"q": f'"{PHRASE}"'},
    "prefix (1 %)": {"q": "zerodivision*"},
    "common word (~all)": {"q": "careful"},
    "two common words": {"q": "careful tools"},
    "common word, env + eval (5 %)": {"q": "careful", "env": "math", "kind": "eval"},
    "common word, oldest 2 steps": {"q": "careful", "step_min": 0, "step_max": 1},
    "common word, reward 0.9-0.91": {"q": "careful", "reward_min": 0.9, "reward_max": 0.91},
    "common word, not ok (1 %)": {"q": "careful", "ok": "false"},
}


def time_queries(url: str, run_id: str | None) -> list[tuple[str, int, float, float, float]]:
    """The queries in one run, or (run_id None) across every run of the project."""
    out = []
    path, scope = (f"/runs/{run_id}/search", {}) if run_id else ("/search", {"project": PROJECT})
    with httpx.Client(base_url=url + "/api/v1", timeout=60) as client:
        for label, params in QUERIES.items():
            if run_id is None and set(params) & {"env", "ok", "reward_min"}:
                continue  # filters of the per-run search only
            times, hits = [], 0
            for _ in range(REPEAT + 1):
                t0 = time.perf_counter()
                body = client.get(path, params={**params, **scope, "limit": 20}).json()
                times.append(time.perf_counter() - t0)
                hits = len(body["items"])
            times = times[1:]  # the first one warms the page cache
            out.append(
                (
                    label,
                    hits,
                    min(times),
                    statistics.median(times),
                    sorted(times)[int(0.95 * (len(times) - 1))],
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1, help="runs to spread the episodes over")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep the data here (default: a temporary directory)",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="openruns-search-bench-"))
    data_dir = args.data_dir or root / "data"
    try:
        print(f"load before: {os.getloadavg()}")
        run_ids, figures = build(data_dir, args.episodes, args.runs)
        print(
            f"{args.episodes:,} episodes: {figures['json_mb']:,.0f} MB of JSON, "
            f"{figures['text_mb']:,.0f} MB of message text, built in {figures['build_s']:.0f} s"
        )
        print(
            f"indexed {figures['indexed']:,} records in {figures['index_s']:.1f} s "
            f"({figures['indexed'] / figures['index_s']:,.0f} records/s, "
            f"{figures['text_mb'] / figures['index_s']:.1f} MB/s of text); "
            f"database {figures['db_mb']:,.0f} MB"
        )
        proc, url = start_server(data_dir)
        try:
            print(f"load before queries: {os.getloadavg()}")
            print(f"{'query':32} {'hits':>5} {'min ms':>8} {'median ms':>10} {'p95 ms':>8}")
            scopes = [(f"one run of {args.runs}", run_ids[0])]
            if args.runs > 1:
                scopes.append((f"across the project's {args.runs} runs", None))
            for title, scope in scopes:
                print(title)
                for label, hits, low, mid, p95 in time_queries(url, scope):
                    print(
                        f"{label:32} {hits:5d} {low * 1000:8.1f} {mid * 1000:10.1f} "
                        f"{p95 * 1000:8.1f}"
                    )
            machine = f"Python {platform.python_version()}, {os.cpu_count()} cores"
            print(f"load after: {os.getloadavg()} ({machine})")
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
