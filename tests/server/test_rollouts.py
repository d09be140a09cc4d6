"""Reading rollouts over HTTP: search behind ingest, previews, reward distributions, step times,
and the run fields a reader edits (notes, tags, group)."""

from __future__ import annotations

import math
import os
import time

import numpy
import pytest

import openruns
import openruns.api
from openruns.server.store.rewards import quantile
from openruns.sync import sync_run
from openruns.wire import WireClient

from .helpers import create_run, error_of, metric_rows, ndjson, upload


def chat(i: int, step: int, reward: float | None, text: str, **extra) -> dict:
    """A verifiers-shaped episode whose assistant says `text`."""
    nodes = [
        {"message": {"role": "user", "content": f"question {i}"}},
        {"message": {"role": "assistant", "content": text}, "sampled": True},
    ]
    return {
        "id": f"ep-{i}",
        "run": {"type": "train", "work": {"type": extra.pop("kind", "train"), "step": step}},
        "env": extra.pop("env", "math"),
        "traces": [{"reward": reward, "nodes": nodes}],
        **extra,
    }


def wait_indexed(client, run_id: str, timeout: float = 30.0) -> None:
    """Until the search index has every record of the run (it is built behind ingest)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/runs/{run_id}/search", params={"q": "anything"}).json()
        if body["pending"] == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the search index did not catch up")


def ids(body) -> list[str]:
    return [item["id"] for item in body["items"]]


@pytest.fixture
def searchable(client):
    rid = create_run(client)["id"]
    records = [
        chat(
            i,
            step=i // 10,
            reward=i / 40,
            text=f"answer {i}: the sandbox timed out" if i % 4 == 0 else f"answer {i}: fine",
            env="code" if i % 2 else "math",
            ok=i % 3 != 0,
            kind="eval" if i % 5 == 0 else "train",
        )
        for i in range(40)
    ]
    records[7]["traces"][0]["nodes"].append(
        {"message": {"role": "tool", "content": "Traceback: ZeroDivisionError in calculator"}}
    )
    records[9]["errors"] = [{"type": "ValueError", "message": "unparsable completion"}]
    upload(client, rid, "episodes", ndjson(records[:25]))
    upload(client, rid, "episodes", ndjson(records[25:]))
    upload(
        client,
        rid,
        "episodes",
        ndjson(
            [{"id": "t-0", "nodes": [{"message": {"role": "user", "content": "a bare sandbox"}}]}]
        ),
        stream="traces",
    )
    wait_indexed(client, rid)
    return rid, records


def test_search_finds_words_phrases_prefixes_newest_first_with_highlights(client, searchable):
    rid, records = searchable
    body = client.get(f"/runs/{rid}/search", params={"q": '"sandbox timed out"'}).json()
    expected = [
        r["id"]
        for r in reversed(records)
        if "sandbox" in r["traces"][0]["nodes"][1]["message"]["content"]
    ]
    assert ids(body) == expected[:20] and body["pending"] == 0
    snippet = body["items"][0]["snippets"][0]
    assert snippet["label"] == "assistant"
    assert [snippet["text"][a:b] for a, b in snippet["matches"]] == ["sandbox timed out"]
    # Tool results and errors are searched too; a prefix matches a word's start.
    assert ids(client.get(f"/runs/{rid}/search", params={"q": "zerodivision*"}).json()) == ["ep-7"]
    hit = client.get(f"/runs/{rid}/search", params={"q": "unparsable"}).json()["items"]
    assert [h["id"] for h in hit] == ["ep-9"] and hit[0]["snippets"][0]["label"] == "error"
    # All words must match; case does not matter; the traces stream is its own.
    assert ids(client.get(f"/runs/{rid}/search", params={"q": "SANDBOX answer 8"}).json()) == [
        "ep-8"
    ]
    traces = client.get(f"/runs/{rid}/search", params={"q": "sandbox", "stream": "traces"}).json()
    assert ids(traces) == ["t-0"]


def test_search_filters_and_pages(client, searchable):
    rid, records = searchable

    def matching(**params):
        return ids(
            client.get(f"/runs/{rid}/search", params={"q": "answer", "limit": 100, **params}).json()
        )

    newest = [r["id"] for r in reversed(records)]

    def where(test):
        return [i for i in newest if test(records[int(i.split("-")[1])])]

    assert matching(step_min=1, step_max=2) == where(lambda r: 1 <= r["run"]["work"]["step"] <= 2)
    assert matching(env="code") == where(lambda r: r["env"] == "code")
    assert matching(ok="false") == where(lambda r: r["ok"] is False)
    assert matching(kind="eval") == where(lambda r: r["run"]["work"]["type"] == "eval")
    assert matching(reward_min=0.5, reward_max=0.6) == where(
        lambda r: 0.5 <= r["traces"][0]["reward"] <= 0.6
    )
    # Pages of 7 follow the cursor to the end, without repeats.
    seen, cursor = [], None
    while True:
        params = {"q": "answer", "limit": 7, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/runs/{rid}/search", params=params).json()
        seen += ids(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == newest


def test_search_of_another_run_finds_nothing_and_bad_queries_are_400(client, searchable):
    rid, _ = searchable
    other = create_run(client)["id"]
    assert client.get(f"/runs/{other}/search", params={"q": "sandbox"}).json()["items"] == []
    assert error_of(client.get(f"/runs/{rid}/search", params={"q": '"" ...'}))[:2] == (
        400,
        "invalid_query",
    )
    assert error_of(client.get(f"/runs/{rid}/search", params={"q": "x", "cursor": "nope"}))[:2] == (
        400,
        "invalid_cursor",
    )
    assert client.get("/runs/nope/search", params={"q": "x"}).status_code == 404


def test_the_read_client_searches(shared_server, searchable):
    rid, _ = searchable
    with openruns.api.Client(shared_server.url) as api:
        hits = list(api.search(rid, "sandbox", env="math", limit=3))
        assert [h["env"] for h in hits] == ["math"] * 3
        assert all(h["snippets"] for h in hits)
        assert len(list(api.search(rid, "answer"))) == 40  # followed the pages


def test_previews_of_listed_records(client, searchable):
    rid, _ = searchable
    body = client.get(f"/runs/{rid}/previews", params={"ids": "ep-4,ep-5,missing,t-0"}).json()
    assert body["ep-4"] == {
        "prompt": "question 4",
        "reply": "answer 4: the sandbox timed out",
        "turns": 1,
        "trace_rewards": [0.1],
    }
    assert body["t-0"] == {"prompt": "a bare sandbox"}
    assert "missing" not in body
    # Again (from the cache): the same answer.
    assert (
        client.get(f"/runs/{rid}/previews", params={"ids": "ep-4,ep-5,missing,t-0"}).json() == body
    )
    too_many = ",".join(f"x{i}" for i in range(201))
    assert error_of(client.get(f"/runs/{rid}/previews", params={"ids": too_many}))[:2] == (
        400,
        "too_many_ids",
    )


def test_previews_of_verifiers_episodes_score_their_traces_and_read_the_task(client):
    # verifiers 0.4.0 serializes `rewards` ({name: {score, weight}}, None where scoring did not
    # run), never `Trace.reward`; a failed episode may have no trace, only its task (issue 24).
    rid = create_run(client)["id"]
    task = {"type": "Task", "data": {"idx": 3, "prompt": "What is 3*7?", "answer": "21"}}
    solver = chat(1, 0, None, "21")["traces"][0]
    del solver["reward"]
    solver["rewards"] = {"correct": {"score": 1.0, "weight": 0.5}, "format": {"score": 1.0}}
    judge = {**solver, "rewards": {"correct": None}}
    records = [
        {"id": "scored", "task": task, "traces": [solver, judge]},
        {"id": "failed", "task": task, "ok": False, "traces": [], "errors": [{"type": "E"}]},
    ]
    upload(client, rid, "episodes", ndjson(records))
    body = client.get(f"/runs/{rid}/previews", params={"ids": "scored,failed"}).json()
    assert body["scored"]["trace_rewards"] == [1.5, None]
    assert body["failed"] == {"prompt": "What is 3*7?", "answer": "21", "trace_rewards": []}
    # The index reads the reward the same way, and counts what is scored per step.
    (row,) = client.get(f"/runs/{rid}/episodes", params={"id": "scored"}).json()["items"]
    assert (row["id"], row["reward"], row["step"]) == ("scored", 1.5, None)
    assert client.get(f"/runs/{rid}/episodes", params={"id": "nope"}).json()["items"] == []
    steps = client.get(f"/runs/{rid}/steps").json()
    assert [(s["count"], s["scored"], s["avg_reward"]) for s in steps] == [(2, 1, 1.5)]


def test_reward_histogram_values_and_quantile_bands(client):
    rid = create_run(client)["id"]
    rewards = {
        step: [((step * 7 + i * 13) % 17) / 4 for i in range(3 + step)] for step in range(12)
    }
    records = [
        chat(100 * s + i, s, r, "x") for s, values in rewards.items() for i, r in enumerate(values)
    ]
    records.append(chat(9999, 3, None, "no reward"))
    upload(client, rid, "episodes", ndjson(records))
    step3 = client.get(f"/runs/{rid}/rewards", params={"step": 3}).json()
    assert step3 == {"step": 3, "values": sorted(rewards[3]), "missing": 1, "truncated": False}
    bands = client.get(f"/runs/{rid}/rewards/quantiles").json()
    assert bands["step"] == list(range(12))
    for i, step in enumerate(bands["step"]):
        values = rewards[step]
        assert bands["count"][i] == len(values)
        assert math.isclose(bands["mean"][i], sum(values) / len(values))
        for q in (10, 50, 90):
            assert math.isclose(bands[f"p{q}"][i], numpy.quantile(values, q / 100), abs_tol=1e-12)
    # More steps than points: consecutive steps pooled, each bucket at its last step.
    pooled = client.get(f"/runs/{rid}/rewards/quantiles", params={"max_points": 4}).json()
    assert pooled["step"] == [2, 5, 8, 11]
    first = sorted(rewards[0] + rewards[1] + rewards[2])
    assert pooled["count"][0] == len(first)
    assert math.isclose(pooled["p50"][0], quantile(first, 0.5))
    ranged = client.get(
        f"/runs/{rid}/rewards/quantiles", params={"step_min": 4, "step_max": 5}
    ).json()
    assert ranged["step"] == [4, 5]


def test_timeline_maps_steps_to_the_metrics_times(client):
    rid = create_run(client)["id"]
    upload(client, rid, "metrics", metric_rows(range(1000), loss=1.0))
    upload(client, rid, "metrics", metric_rows(range(0, 1000, 100), other=2.0))
    line = client.get(f"/runs/{rid}/timeline", params={"points": 11}).json()
    # Evenly spaced over the longest series (loss, steps 0..999), ending at its last step.
    assert line["step"] == [999 * i // 10 for i in range(11)]
    assert line["ts"] == [1.0e9 + s for s in line["step"]]
    empty = create_run(client)["id"]
    assert client.get(f"/runs/{empty}/timeline").json() == {"step": [], "ts": []}


def test_notes_tags_and_group_are_edited_and_runs_filter_by_group(client):
    run = create_run(client, name="grouped", group="sweep-1")
    assert run["group"] == "sweep-1" and run["notes"] is None
    rid = run["id"]
    patched = client.patch(
        f"/runs/{rid}", json={"notes": "lr too high?\nsee step 40", "tags": ["x", "y"]}
    ).json()
    assert patched["notes"] == "lr too high?\nsee step 40" and patched["tags"] == ["x", "y"]
    assert patched["group"] == "sweep-1"  # not named: unchanged
    listed = client.get("/runs", params={"group": "sweep-1"}).json()["items"]
    assert [r["id"] for r in listed] == [rid]
    cleared = client.patch(f"/runs/{rid}", json={"notes": None, "group": None}).json()
    assert cleared["notes"] is None and cleared["group"] is None
    assert client.get("/runs", params={"group": "sweep-1"}).json()["items"] == []
    assert error_of(client.patch(f"/runs/{rid}", json={"group": ""}))[0] == 422


def test_init_group_reaches_the_server_online_and_through_sync(shared_server, client, tmp_path):
    online = openruns.init(kind="eval", group="sweep-7", base_url=shared_server.url, dir=tmp_path)
    online.finish()
    assert client.get(f"/runs/{online.id}").json()["group"] == "sweep-7"
    for name in ("OPENRUNS_RUN_ID", "OPENRUNS_RUN_PID", "OPENRUNS_RUN_KIND", "OPENRUNS_RUN_DIR"):
        os.environ.pop(name, None)  # the next init opens a run of its own
    offline = openruns.init(kind="eval", group="sweep-8", mode="offline", dir=tmp_path / "off")
    offline.finish()
    http = WireClient(shared_server.url, None)
    try:
        assert sync_run(http, offline.dir).errors == []
    finally:
        http.close()
    assert client.get(f"/runs/{offline.id}").json()["group"] == "sweep-8"
    with pytest.raises(openruns.ConfigurationError, match="group"):
        openruns.init(kind="eval", group="", mode="disabled")
