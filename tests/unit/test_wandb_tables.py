"""
W&B tables as episodes (server/wandb/tables.py): each framework's table, with the columns its
source logs, becomes the episodes a reader expects; any other table is not rollouts.

Sources (the commits the search tool's snapshots hold):
- TRL f2cd57710ae345ea6428ae95363267fcf38a3dc8: trl/trainer/grpo_trainer.py `log` (and
  rloo_trainer.py alike): step, prompt, completion, *reward_func_names, *extra, advantage[, image];
  trl/trainer/callbacks.py LogCompletionsCallback: ["step", "prompt", "completion"], str(step),
  the rows of every earlier call kept.
- verl b178a3cd56f58b2d502255daba591e92833930a7: verl/utils/tracking.py
  ValidationGenerationsLogger: ["step"] + [input_i, output_i, score_i for i in 1..N], one row per
  validation, the table re-logged whole as `val/generations`.
- OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7: openrlhf/utils/logging_utils.py
  WandbLogger: ["global_step", "text", "reward"], `train/generated_samples`, re-logged whole.
- prime-rl 9975d8868^ (before #3275 removed it): src/prime_rl/utils/monitor/wandb.py:
  ["step", "env_name", "task", "task_idx", "messages", "input_ids", "reward"] (INCREMENTAL,
  `samples`) and ["step", "env", "task", "task_idx", "completion", "reward"] (`eval/samples`).
- NeMo-RL 00617d3dcdde6a30f75bbd6d072eceb087e275ea: nemo_rl/experience/rollouts.py
  run_async_nemo_gym_rollout: `{agent}/full_result`, ["Full result"], json.dumps of each NeMo Gym
  verify response.
- SkyRL a9564572eb8e91076be43c1bd5e4615e3de17265: skyrl/train/utils/trajectory_logging.py
  ("step", "idx", "reward", "num_turns", "trajectory"); tracking.py's error table ("step",
  "type", "traceback") is not rollouts.
"""

from __future__ import annotations

import json

import pytest

from openruns.records import index_fields
from openruns.server.rollouts import Query, record_preview, record_text, snippets
from openruns.server.wandb.history import history_row
from openruns.server.wandb.media import (
    check_media_path,
    content_type,
    image_part,
    media_item,
    media_refs,
    servable,
    table_source,
)
from openruns.server.wandb.tables import episodes_from_table, parse_table


def artifact_table(columns, rows, **extra):
    """A table as the run_table artifact holds it (data_types/table.py Table.to_json)."""
    return {
        "_type": "table",
        "columns": columns,
        "data": rows,
        "log_mode": "IMMUTABLE",
        "ncols": len(columns),
        "nrows": len(rows),
        **extra,
    }


def image_cell(name, caption=None):
    cell = {
        "_type": "image-file",
        "format": "png",
        "height": 8,
        "width": 8,
        "path": f"media/images/{name}.png",
        "sha256": "4a09" * 16,
    }
    if caption:
        cell["caption"] = caption
    return cell


def test_trl_grpo_completions_are_episodes_with_per_function_rewards():
    columns = [
        "step",
        "prompt",
        "completion",
        "accuracy_reward",
        "format_reward",
        "solution",
        "advantage",
    ]
    rows = [
        [7, "What is 2+2?", "<think>two and two</think>4", 1.0, 0.5, "4", 0.75],
        [7, "What is 2+2?", "5", 0.0, None, "4", -0.75],  # format_reward returned None
    ]
    episodes = episodes_from_table(artifact_table(columns, rows), step=30, key="completions")
    assert episodes is not None and len(episodes) == 2
    first, second = episodes
    assert first["step"] == 7  # the trainer's global_step column, not the history step
    assert first["kind"] == "train"
    assert (
        first["prompt"] == "What is 2+2?" and first["completion"] == "<think>two and two</think>4"
    )
    assert first["rewards"] == {
        "accuracy_reward": {"score": 1.0, "weight": 1.0},
        "format_reward": {"score": 0.5, "weight": 1.0},
    }
    assert first["reward"] == 1.5
    assert first["metrics"] == {"advantage": 0.75}
    assert first["answer"] == "4"
    assert second["rewards"]["format_reward"] is None and second["reward"] == 0.0
    # The index, previews and search read them as they read native episodes.
    row = index_fields(first, None)
    assert (row["step"], row["reward"], row["kind"]) == (7, 1.5, "train")
    preview = record_preview(first)
    assert preview["prompt"] == "What is 2+2?" and preview["answer"] == "4"
    hits = snippets(record_text(first), Query.parse("two"))
    assert hits and hits[0]["text"].startswith("<think>two")
    assert first["id"] != second["id"]


def test_identical_rows_of_one_table_stay_apart():
    # GRPO samples the same prompt num_generations times; short answers repeat exactly.
    rows = [[3, "1+1?", "2", 1.0, 0.0]] * 4
    columns = ["step", "prompt", "completion", "accuracy_reward", "advantage"]
    episodes = episodes_from_table(artifact_table(columns, rows), step=3, key="completions")
    assert len({e["id"] for e in episodes}) == 4


def test_trl_images_become_content_parts_of_the_prompt():
    columns = ["step", "prompt", "completion", "accuracy_reward", "advantage", "image"]
    rows = [
        [2, "What is in the picture?", "a cat", 1.0, 0.5, [image_cell("62206b390dc8795f3696")]],
        [2, "And here?", "nothing", 0.0, -0.5, []],
    ]
    first, second = episodes_from_table(artifact_table(columns, rows), step=2, key="completions")
    assert first["prompt"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": "media/images/62206b390dc8795f3696.png"},
                },
                {"type": "text", "text": "What is in the picture?"},
            ],
        }
    ]
    assert second["prompt"] == "And here?"
    assert "image" not in first.get("info", {})
    assert record_preview(first)["prompt"] == "What is in the picture?"


def test_run_file_copy_of_a_table_with_images_still_gives_the_text():
    # media/table/<key>_<step>_<hash>.table.json: no _type, an image is the string "Image".
    table = {
        "columns": ["step", "prompt", "completion", "reward", "image"],
        "data": [[1, "hi", "there", 0.5, "Image"]],
    }
    (episode,) = episodes_from_table(table, step=1, key="completions")
    assert episode["prompt"] == "hi" and episode["completion"] == "there"
    assert episode["reward"] == 0.5


def test_trl_log_completions_callback_keeps_every_earlier_row():
    columns = ["step", "prompt", "completion"]
    first_log = artifact_table(columns, [["10", "Say hi", "hi"]])
    second_log = artifact_table(columns, [["10", "Say hi", "hi"], ["20", "Say hi", "hello"]])
    one = episodes_from_table(first_log, step=10, key="completions")
    two = episodes_from_table(second_log, step=20, key="completions")
    assert [e["step"] for e in two] == [10, 20]  # str(step), as the callback writes it
    # The re-logged row is the same episode: the store indexes its id once.
    assert one[0]["id"] == two[0]["id"] and two[1]["id"] != two[0]["id"]
    assert "reward" not in two[0]


def test_verl_validation_generations_are_n_eval_episodes_per_row():
    columns = ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    rows = [
        [0, "user: 3*3?", "9", 1.0, "user: 2^5?", "32", 1.0],
        [10, "user: 3*3?", "6", 0.0, "user: 2^5?", "32", 1.0],
    ]
    episodes = episodes_from_table(artifact_table(columns, rows), step=10, key="val/generations")
    assert [(e["step"], e["prompt"], e["completion"], e["reward"]) for e in episodes] == [
        (0, "user: 3*3?", "9", 1.0),
        (0, "user: 2^5?", "32", 1.0),
        (10, "user: 3*3?", "6", 0.0),
        (10, "user: 2^5?", "32", 1.0),
    ]
    assert {e["kind"] for e in episodes} == {"eval"}
    assert len({e["id"] for e in episodes}) == 4
    # verl logs the grown table again at the next validation: the old row keeps its ids.
    again = episodes_from_table(artifact_table(columns, rows[:1]), step=0, key="val/generations")
    assert [e["id"] for e in again] == [e["id"] for e in episodes[:2]]


def test_openrlhf_generated_samples():
    columns = ["global_step", "text", "reward"]
    rows = [[1, "Question: 2+2? Answer: 4", 1.0], [2, "Question: 3+3? Answer: 7", 0.0]]
    episodes = episodes_from_table(
        artifact_table(columns, rows), step=None, key="train/generated_samples"
    )
    assert [(e["step"], e["completion"], e["reward"]) for e in episodes] == [
        (1, "Question: 2+2? Answer: 4", 1.0),
        (2, "Question: 3+3? Answer: 7", 0.0),
    ]
    assert record_preview(episodes[0])["reply"] == "Question: 2+2? Answer: 4"


def test_prime_rl_incremental_samples_are_chats():
    columns = ["step", "env_name", "task", "task_idx", "messages", "input_ids", "reward"]
    decoded = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|><|endoftext|>"
    )
    task = json.dumps({"idx": 5, "answer": "4", "info": {}})
    table = artifact_table(
        columns,
        [[12, "gsm8k", task, 5, decoded, "[151644, 8948, 198]", 1.0]],
        log_mode="INCREMENTAL",
        increment_num=3,
    )
    (episode,) = episodes_from_table(table, step=40, key="samples")
    assert episode["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    assert (episode["step"], episode["env"], episode["reward"]) == (12, "gsm8k", 1.0)
    assert episode["token_ids"] == [151644, 8948, 198]
    assert episode["metrics"] == {"task_idx": 5}
    assert record_preview(episode) == {"prompt": "2+2?", "reply": "4", "turns": 1, "answer": "4"}
    assert index_fields(episode, None)["env"] == "gsm8k"
    # The next increment holds only its own rows, so the same row place is another episode.
    later = episodes_from_table({**table, "increment_num": 4}, step=41, key="samples")
    assert later[0]["id"] != episode["id"]


def test_prime_rl_eval_samples_are_eval_episodes():
    columns = ["step", "env", "task", "task_idx", "completion", "reward"]
    rows = [[20, "aime", json.dumps({"answer": "42"}), 0, "The answer is 42.", 1.0]]
    (episode,) = episodes_from_table(artifact_table(columns, rows), step=20, key="eval/samples")
    assert (episode["kind"], episode["env"], episode["completion"]) == (
        "eval",
        "aime",
        "The answer is 42.",
    )


def test_nemo_rl_full_results_read_as_responses_api_chats():
    result = {
        "responses_create_params": {
            "instructions": "Use the calculator.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "What is 6*7?"}]}
            ],
        },
        "response": {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "multiply"}]},
                {
                    "type": "function_call",
                    "name": "mul",
                    "arguments": '{"a": 6, "b": 7}',
                    "call_id": "c1",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "It is 42."}],
                },
            ]
        },
        "reward": 1.0,
        "expected_answer": "42",
        "library_reward": float("nan"),
    }
    table = artifact_table(["Full result"], [[json.dumps(result, separators=(",", ":"))]])
    (episode,) = episodes_from_table(table, step=5, key="train/calculator_agent/full_result")
    messages = episode["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] == "What is 6*7?"
    assert messages[2]["reasoning"] == "multiply"
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "mul",
        "arguments": '{"a": 6, "b": 7}',
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "42", "sampled": True}
    assert (episode["reward"], episode["step"], episode["env"]) == (1.0, 5, "calculator_agent")
    assert episode["info"] == {"expected_answer": "42"}  # NaN left out
    assert record_preview(episode)["reply"] == "It is 42."


def test_skyrl_trajectories_and_its_error_table():
    columns = ["step", "idx", "reward", "num_turns", "trajectory"]
    (episode,) = episodes_from_table(
        artifact_table(columns, [[3, 17, 0.5, 2, "search: paris\nanswer: Paris"]]),
        step=3,
        key="train/trajectories",
    )
    assert (episode["completion"], episode["reward"]) == ("search: paris\nanswer: Paris", 0.5)
    assert episode["metrics"] == {"idx": 17, "num_turns": 2}
    errors = artifact_table(["step", "type", "traceback"], [[3, "ValueError", "Traceback ..."]])
    assert episodes_from_table(errors, step=3, key="error/tracebacks") is None


@pytest.mark.parametrize(
    "table",
    [
        artifact_table(["epoch", "loss", "accuracy"], [[1, 0.3, 0.9]]),  # a metrics table
        artifact_table(["prompt", "answer"], [["2+2?", "4"]]),  # a dataset: no model output
        artifact_table(["text"], [["hello"]]),  # text alone: no prompt, no reward
        {"_type": "joined-table", "columns": ["completion"], "data": [["x"]]},
        {"columns": ["completion", "reward"], "data": [["x"]]},  # a row shorter than the columns
        {"columns": "completion", "data": []},
        {"data": [["x"]]},
    ],
)
def test_other_tables_are_not_rollouts(table):
    assert episodes_from_table(table, step=1, key="t") is None


def test_a_table_without_a_step_column_takes_the_history_step():
    table = artifact_table(["question", "response", "score"], [["q", "r", 2.0]])
    (at_3,) = episodes_from_table(table, step=3, key="generations")
    (at_4,) = episodes_from_table(table, step=4, key="generations")
    assert (at_3["step"], at_3["reward"], at_3["prompt"]) == (3, 2.0, "q")
    assert at_3["id"] != at_4["id"]  # the same rows logged at another step are other rollouts


def test_message_list_cells_and_nonfinite_rewards():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    table = artifact_table(["prompt", "completion", "reward"], [[prompt, "a", float("nan")]])
    (episode,) = episodes_from_table(table, step=0, key="samples")
    assert episode["prompt"] == prompt and "reward" not in episode
    assert record_preview(episode)["prompt"] == "u"


def test_media_paths_are_checked_before_they_name_a_blob():
    assert check_media_path("media/images/pic_3_6e5edb15b6bed556ae7e.png")
    for bad in (
        "../media/x.png",
        "media/../../etc/passwd",
        "/media/images/x.png",
        "media/images/.x",
        "media//x.png",
        "images/x.png",
        42,
        None,
    ):
        assert check_media_path(bad) is None
    separated = {
        "_type": "images/separated",
        "count": 2,
        "format": "png",
        "width": 4,
        "height": 4,
        "filenames": ["media/images/imgs_0_d6325bd24a66141e9be5.png", "../x.png"],
    }
    assert [r.path for r in media_refs(separated)] == [
        "media/images/imgs_0_d6325bd24a66141e9be5.png"
    ]
    (ref,) = media_refs(image_cell("abc", caption="a cat"))
    assert image_part(ref) == {
        "type": "image_url",
        "image_url": {"url": "media/images/abc.png"},
        "caption": "a cat",
    }
    assert media_refs({"_type": "table-file", "path": "media/table/x.table.json"}) == []


def test_media_values_of_a_history_row_are_listed_as_items():
    # A history row as file_stream carries it (probed with wandb 0.31.0: run.log({...}, step=1)).
    table = {
        "_type": "table-file",
        "path": "media/table/completions_1_22cd207f9964b1d61c85.table.json",
        "sha256": "22cd",
        "size": 143,
        "ncols": 6,
        "nrows": 2,
        "log_mode": "IMMUTABLE",
        "artifact_path": "wandb-client-artifact://kbcu/completions.table.json",
    }
    pic = {
        "_type": "image-file",
        "path": "media/images/pic_1_6e5edb15b6bed556ae7e.png",
        "format": "png",
        "width": 4,
        "height": 4,
        "sha256": "6e5e",
        "size": 77,
    }
    line = {"_step": 1, "loss": 1.0, "completions": table, "val": {"pic": pic, "acc": 0.5}}
    row = history_row(json.dumps(line))  # the wire's reading of a history line
    assert list(row.media) == ["completions", "val/pic"] and "val/acc" in row.values
    items = [media_item(k, row.step, v) for k, v in row.media.items()]
    assert items == [
        {
            "key": "completions",
            "step": 1,
            "type": "table-file",
            "nrows": 2,
            "ncols": 6,
            "log_mode": "IMMUTABLE",
            "paths": ["artifacts/kbcu/completions.table.json"],  # the copy with the images
        },
        {
            "key": "val/pic",
            "step": 1,
            "type": "image-file",
            "width": 4,
            "height": 4,
            "paths": ["media/images/pic_1_6e5edb15b6bed556ae7e.png"],
        },
    ]
    assert media_item("bad", 1, {**pic, "path": "../../etc/passwd"}) is None
    assert content_type(items[1]["paths"][0]) == "image/png"
    assert content_type(items[0]["paths"][0]) == "application/json"
    assert content_type("media/html/page.html") == "application/octet-stream"


def test_a_table_is_read_from_its_artifact_copy_which_has_the_images():
    value = {
        "_type": "table-file",
        "path": "media/table/completions_1_22cd.table.json",
        "artifact_path": "wandb-client-artifact://kbcu9x/completions.table.json",
        "_latest_artifact_path": "wandb-client-artifact://y42z:latest/completions.table.json",
    }
    assert table_source(value) == "artifacts/kbcu9x/completions.table.json"
    assert media_item("completions", 1, value)["paths"] == [
        "artifacts/kbcu9x/completions.table.json"
    ]
    for artifact in ("wandb-client-artifact://../x.table.json", "wandb-artifact://_id/x", None):
        assert table_source({**value, "artifact_path": artifact}) == value["path"]


def test_table_files_with_nan_are_read_and_served_as_json():
    data = b'{"columns": ["prompt", "completion", "reward"], "data": [["q", "a", NaN]]}'
    (episode,) = episodes_from_table(parse_table(data), step=1, key="completions")
    assert "reward" not in episode
    served = servable("media/table/completions_1_22cd.table.json", data)
    assert json.loads(served)["data"] == [["q", "a", None]]
    assert servable("media/images/x.png", b"\x89PNG") == b"\x89PNG"
    assert parse_table(b"[1, 2]") is None and parse_table(b"{not json") is None
