"""
The unmodified prime-runs 0.1.4 SDK (and prime-traces 0.0.10) logging into openruns: each
scenario runs the real SDK in its own process with only PRIME_API_BASE_URL, PRIME_TRACES_URL
and PRIME_API_KEY set, then reads the run back through the native API.
"""

from __future__ import annotations

import io

import httpx
import pyarrow.parquet as pq

from ..patience import REQUEST
from .helpers import FaultOnce, assert_clean, run_sdk, stamped


def _episodes(client, run_id, stream="episodes"):
    rows = list(client.episodes(run_id, stream=stream))
    return {row["id"]: client.episode(run_id, row["id"]) for row in rows}, rows


def test_an_eval_by_environment_name_uploads_traces_and_finishes_with_a_summary(
    server, client, tmp_path
):
    # What verifiers' eval does: init online, log episodes as they finish, finish with
    # pr.metrics.from_episodes; plus bare traces.
    report, stderr = run_sdk(
        """
        eps = [episode(i, judge=i % 2 == 0, reward=i / 4) for i in range(4)]
        traces = [{"id": f"bare-{i}", "reward": 0.5, "task": {"idx": i}} for i in range(2)]
        run = pr.init(
            environments=["gsm8k"],
            model="Qwen/Qwen3-8B",
            framework="verifiers",
            config={"model": "Qwen/Qwen3-8B", "num_examples": 4, "rollouts_per_example": 1},
            tags=["smoke"],
        )
        run.log_episodes(eps[:2])
        run.log_episodes(eps[2:])
        run.log_traces(traces)
        summary = pr.metrics.from_episodes(eps)
        run.finish(summary)
        report(run, records=[e.to_record() for e in eps], traces=traces, summary=summary)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert (run["kind"], run["status"], run["error"]) == ("eval", "completed", None)
    assert run["name"].startswith("gsm8k-") and run["model"] == "Qwen/Qwen3-8B"
    assert [e["name"] for e in run["environments"]] == ["gsm8k"]
    assert (run["framework"], run["tags"]) == ("verifiers", ["smoke"])
    assert run["config"]["format"] == "json" and '"num_examples": 4' in run["config"]["text"]
    assert run["summary"] == {
        **report["summary"],
        "prime_runs": {"traces_episodes_written": 4},
    }
    assert report["url"] == f"{server.url}/runs/{run['id']}"
    stored, rows = _episodes(client, run["id"])
    # verifiers-shaped episodes round-trip unchanged apart from the run stamp.
    assert stored == {r["id"]: stamped(r, run["id"], "eval") for r in report["records"]}
    assert {r["reward"] for r in rows} == {0.0, 0.25, 0.5, 0.75}
    assert {r["step"] for r in rows} == {0}  # an eval is one step, browsable in the dashboard
    traces, _ = _episodes(client, run["id"], "traces")
    assert traces == {t["id"]: stamped(t, run["id"], "eval") for t in report["traces"]}


def test_an_eval_that_raises_inside_with_run_fails_with_the_message(server, client, tmp_path):
    report, stderr = run_sdk(
        """
        run = pr.init(environments=["alice/math"], model="m", config={"c": 1})
        try:
            with run:
                run.log_episodes([episode(0)])
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        report(run)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert (run["status"], run["error"]) == ("failed", "RuntimeError: boom")
    assert [e["name"] for e in run["environments"]] == ["math"]
    assert len(list(client.episodes(run["id"]))) == 1


def test_a_training_run_with_metrics_one_replayed_after_a_502_is_finalized(
    server, client, tmp_path
):
    proxy = FaultOnce(server.url, "/rft/metrics", nth=2).start()
    try:
        report, stderr = run_sdk(
            """
            run = pr.init(
                kind="train",
                model="Qwen/Qwen3-8B",
                team_id="default",
                environments=["primeintellect/gsm8k"],
                training=pr.TrainingSpec(max_steps=3, batch_size=8, rollouts_per_example=4),
                config={"lr": 1e-6},
            )
            for step in range(3):
                row = {"loss": 1 / (step + 1), "opt": {"lr": 1e-6}, "_timestamp": 1000.0 + step}
                run.log_metrics(row, step=step)
                run.log_episodes([episode(10 * step + i, step=step, kind="train") for i in (0, 1)])
            run.finish()
            report(run)
            """,
            tmp_path,
            proxy.url,
            traces_url=server.url,
        )
    finally:
        proxy.stop()
    assert proxy.faults == {"502_after": 1} and proxy.seen == 4  # three rows, one replayed
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert (run["kind"], run["status"], run["model"]) == ("train", "completed", "Qwen/Qwen3-8B")
    assert run["training"] == {"max_steps": 3, "batch_size": 8, "rollouts_per_example": 4}
    assert run["environments"] == [{"id": "primeintellect/gsm8k", "name": "primeintellect/gsm8k"}]
    points = {(m["key"], m["step"]): m["value"] for m in client.metrics(run["id"])}
    assert points == {
        **{("loss", s): 1.0 / (s + 1) for s in range(3)},
        **{("opt/lr", s): 1e-6 for s in range(3)},
    }
    export = httpx.get(
        f"{server.url}/api/v1/runs/{run['id']}/export/metrics.ndjson", timeout=REQUEST
    ).text
    assert '"step":2,"value":0.3333333333333333,"ts":1002.0' in export
    steps = sorted(row["step"] for row in client.episodes(run["id"]))
    assert steps == [0, 0, 1, 1, 2, 2]


def test_a_cancelled_training_run(server, client, tmp_path):
    report, stderr = run_sdk(
        """
        run = pr.init(kind="train", model="m", team_id="default")
        try:
            with run:
                run.log_metrics({"loss": 1.0}, step=0)
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            pass
        report(run)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert (run["status"], run["error"]) == ("cancelled", "interrupted")
    assert client.metrics(run["id"]) == [{"step": 0, "key": "loss", "value": 1.0, "ts": None}]


def test_opted_out_eval_rows_are_kept_and_their_episodes_stored(server, client, tmp_path):
    report, stderr = run_sdk(
        """
        eps = [episode(i % 2, judge=True) for i in range(3)]
        run = pr.init(environments=["gsm8k"], model="m")
        run.log_episodes(eps)
        run.finish()
        report(
            run,
            rows=pr.projection.build_samples(eps),
            records=[e.to_record() for e in eps],
        )
        """,
        tmp_path,
        server.url,
        PRIME_TRACES_OPT_OUT="true",
    )
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert run["status"] == "completed"
    # Nothing went to Prime Traces: the rows went to the legacy table.
    assert run["summary"] == {"prime_runs": {"traces_episodes_written": 0}}
    exported = httpx.get(
        f"{server.url}/api/v1/runs/{run['id']}/prime/eval-samples", timeout=REQUEST
    )
    rows = [httpx.Response(200, content=line).json() for line in exported.content.splitlines()]
    assert rows == report["rows"]
    assert [r["rollout_number"] for r in rows] == [1, 1, 2]
    stored, _ = _episodes(client, run["id"])
    assert stored == {r["id"]: stamped(r, run["id"], "eval") for r in report["records"]}


def test_opted_out_training_samples_go_through_presign_put_and_confirm(server, client, tmp_path):
    report, stderr = run_sdk(
        """
        run = pr.init(kind="train", model="m", team_id="default")
        records = []
        for step in (0, 5, 10, 20):
            eps = [episode(step + i, step=step, kind="train", advantage=0.1 * i) for i in range(3)]
            run.log_metrics({"reward": step / 10}, step=step)
            run.log_episodes(eps)
            if step % 10 == 0:
                records += [e.to_record() for e in eps]
        run.finish()
        report(run, records=records)
        """,
        tmp_path,
        server.url,
        PRIME_TRACES_OPT_OUT="true",
    )
    assert_clean(report, stderr)
    run = client.run(report["id"])
    assert run["status"] == "completed"
    base = f"{server.url}/api/v1/runs/{run['id']}/prime/train-samples"
    objects = httpx.get(base, timeout=REQUEST).json()["items"]
    assert [(o["step"], o["rows"]) for o in objects] == [(0, 3), (10, 3), (20, 3)]
    table = pq.read_table(
        io.BytesIO(httpx.get(server.url + objects[1]["url"], timeout=REQUEST).content)
    )
    assert table.column("run_id").to_pylist() == [run["id"]] * 3
    assert table.column("step").to_pylist() == [10] * 3
    assert table.column("advantage").to_pylist() == [0.0, 0.1, 0.2]
    # Step 5 is off the SDK's every-10th-step cadence: neither a table nor episodes.
    stored, rows = _episodes(client, run["id"])
    assert sorted(r["step"] for r in rows) == [0, 0, 0, 10, 10, 10, 20, 20, 20]
    assert stored == {r["id"]: stamped(r, run["id"], "train") for r in report["records"]}
    assert len(client.metrics(run["id"])) == 4


def test_id_attaches_to_a_run_that_already_exists(server, client, tmp_path):
    created = httpx.post(
        f"{server.url}/api/v1/runs", json={"kind": "eval", "name": "hosted"}, timeout=REQUEST
    )
    run_id = created.json()["id"]
    report, stderr = run_sdk(
        f"""
        eps = [episode(i) for i in range(2)]
        run = pr.init(id={run_id!r}, config={{"ignored": True}})
        assert run.attached
        run.log_episodes(eps)
        run.finish({{"accuracy": 0.5}})
        report(run, records=[e.to_record() for e in eps])
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    run = client.run(run_id)
    assert (run["name"], run["status"], run["config"]) == ("hosted", "completed", None)
    assert run["summary"] == {"accuracy": 0.5, "prime_runs": {"traces_episodes_written": 2}}
    stored, _ = _episodes(client, run_id)
    assert stored == {r["id"]: stamped(r, run_id, "eval") for r in report["records"]}

    # A hosted training run: attached through the internal root its launcher hands over
    # ($PRIME_API_BASE), where prime-runs also sends the key as x-api-key.
    train = httpx.post(f"{server.url}/api/v1/runs", json={"kind": "train"}, timeout=REQUEST).json()[
        "id"
    ]
    watch = FaultOnce(server.url, "/api/internal/rft/metrics", nth=0).start()  # counts only
    try:
        report, stderr = run_sdk(
            f"""
            run = pr.init(kind="train", id={train!r})
            run.log_metrics({{"loss": 0.25}}, step=7)
            run.finish()
            report(run)
            """,
            tmp_path,
            f"{watch.url}/api/internal/rft",
            traces_url=server.url,
        )
    finally:
        watch.stop()
    assert watch.seen == 1 and watch.faults == {}
    assert_clean(report, stderr)
    assert client.run(train)["status"] == "completed"
    assert client.metrics(train) == [{"step": 7, "key": "loss", "value": 0.25, "ts": None}]
