"""
W&B tables of rollouts as episodes (issue 19). Pure: no I/O.

    episodes = episodes_from_table(table, step=12, key="completions")
    # a list of episode records (any of them may be logged again: ids repeat, see below),
    # or None: not a table of rollouts (kept and shown as a plain table)

`table` is the JSON of a logged `wandb.Table` as the SDK (0.31.0, `data_types/table.py`)
writes it: the table of the run's `run_table` artifact (`{"_type": "table", "columns",
"data", "column_types", "log_mode", "ncols", "nrows"}`, images as `image-file` references), or
the run file `media/table/<key>_<step>_<hash>.table.json` (`{"columns", "data"}`, an image is
the string "Image" there). An INCREMENTAL table (`log_mode`) holds the rows added since its
last log (`increment_num` counts the logs). Cells are JSON values; NaN and infinities (the SDK
writes them as `NaN`, `Infinity`) count as missing. `step` is the history step the table was
logged at, `key` its history key ("completions", "val/generations").

One episode per rollout, in the shapes the frameworks log (read in their source):

    verl      step, input_1, output_1, score_1, ... input_N, output_N, score_N: N rollouts a
              row (ValidationGenerationsLogger, `val/generations`: eval)
    NeMo-RL   "Full result": one JSON string a row, a NeMo Gym verify response (reward,
              responses_create_params.input, response.output: Responses API items)
    TRL       step, prompt, completion, a column per reward function, extras, advantage, image
    OpenRLHF  global_step, text, reward          SkyRL  step, idx, reward, num_turns, trajectory
    prime-rl  step, env_name, task, task_idx, messages (a decoded chat template), input_ids,
              reward; and eval/samples: step, env, task, task_idx, completion, reward

and any table with a reply-like column (completion, response, output, generation), or a
text-like one (text, trajectory, messages, conversation) beside a prompt or reward. An episode
is an ordinary record (`rollouts.py` reads it): `prompt` / `completion` (strings or message
lists) or `messages`, `reward`, `rewards` (per reward function: `{name: {score, weight}}`),
`answer`, `env`, `metrics` (advantage and the other numbers), `info` (the other columns),
`step` (the row's own step column, else `step`), `kind` (eval under a val/ or eval/ key, else
train), images as content parts of the first user message (`media.image_part`).

Ids are a digest of the key, the row's place and content (and `step` for a table without a
step column): the tables verl, OpenRLHF and SkyRL re-log whole every step (their workaround
for wandb#2981) give the same episodes the same ids each time, and the store indexes an id
once per run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ...records import clean_finite
from ...spec import MAX_STEP
from .chats import chat_template_messages, responses_messages
from .media import image_part, media_refs

__all__ = ["episodes_from_table", "parse_table"]

Record = dict[str, Any]

_STEP = ("step", "global_step", "train/global_step", "_step", "iteration")
_PROMPT = ("prompt", "question", "input", "query", "instruction", "problem")
_REPLY = ("completion", "response", "output", "generation", "generated_text")
_TEXT = ("text", "trajectory", "messages", "conversation", "sequence", "sample")
_REWARD = ("reward", "score", "rewards", "total_reward", "final_reward")
_ADVANTAGE = ("advantage", "advantages")
_ANSWER = ("answer", "ground_truth", "solution", "expected_answer", "target", "reference")
_ENV = ("env", "env_name", "environment", "data_source", "task_name")
_TOKENS = ("input_ids", "token_ids")
# Numbers that count or index things, never a reward component (SkyRL num_turns, prime-rl
# task_idx).
_COUNT = re.compile(r"(^|_)(idx|index|id|count|num|turns?|len|length|tokens?|epoch)(_|$)")
_VERL = re.compile(r"(input|output|score)_(\d+)")
_FULL_RESULT = ("full result", "full_result")
_EVAL_PARTS = frozenset({"val", "eval", "evaluation", "validation", "test"})


def episodes_from_table(
    table: Mapping[str, Any], *, step: int | None, key: str
) -> list[Record] | None:
    """The table's rollouts as episode records, or None when its columns hold no rollouts
    (or it is not a table: another `_type`, rows that do not match the columns)."""
    parsed = _Table.read(table)
    if parsed is None:
        return None
    if parsed.verl_samples():
        return _verl(parsed, step, key)
    if len(parsed.columns) == 1 and parsed.names[0] in _FULL_RESULT:
        return _nemo_gym(parsed, step, key)
    return _columns(parsed, step, key)


def parse_table(data: bytes) -> dict[str, Any] | None:
    """A table file's JSON object (NaN and infinities, as the SDK writes them, read as
    floats), or None when the file is not a JSON object."""
    try:
        table = json.loads(data)
    except ValueError:
        return None
    return table if isinstance(table, dict) else None


@dataclass(frozen=True)
class _Table:
    columns: list[str]
    names: list[str]  # lower-cased, for matching
    rows: list[list[Any]]
    increment: int | None

    @classmethod
    def read(cls, table: Mapping[str, Any]) -> _Table | None:
        if not isinstance(table, Mapping) or table.get("_type", "table") != "table":
            return None
        columns, data = table.get("columns"), table.get("data")
        if not isinstance(columns, list) or not columns or not isinstance(data, list):
            return None
        if not all(isinstance(row, list) and len(row) == len(columns) for row in data):
            return None
        names = [str(c).strip().lower() for c in columns]
        increment = table.get("increment_num") if table.get("log_mode") == "INCREMENTAL" else None
        return cls(
            [str(c) for c in columns], names, data, increment if _is_int(increment) else None
        )

    def find(self, candidates: tuple[str, ...]) -> int | None:
        """The index of the first of `candidates` among the columns."""
        for name in candidates:
            if name in self.names:
                return self.names.index(name)
        return None

    def verl_samples(self) -> list[int]:
        """verl's sample numbers (1..N) when the columns are exactly step and N complete
        input_i / output_i / score_i triples, else []."""
        seen: dict[int, set[str]] = {}
        for name in self.names:
            match = _VERL.fullmatch(name)
            if match:
                seen.setdefault(int(match.group(2)), set()).add(match.group(1))
            elif name != "step":
                return []
        if "step" not in self.names or not seen or any(len(v) != 3 for v in seen.values()):
            return []
        return sorted(seen)

    def episode_id(
        self, key: str, index: int, sample: int, step: int | None, has_step: bool
    ) -> str:
        where = [key, self.increment, index, sample, None if has_step else step]
        body = orjson.dumps([where, self.rows[index]])
        return "wandb-" + hashlib.sha256(body).hexdigest()[:32]


def _verl(table: _Table, step: int | None, key: str) -> list[Record]:
    # verl's ValidationGenerationsLogger (verl/utils/tracking.py): validation samples only.
    at = table.names.index
    out = []
    for index, row in enumerate(table.rows):
        row_step = _step(row[at("step")], step)
        for i in table.verl_samples():
            prompt, output = row[at(f"input_{i}")], row[at(f"output_{i}")]
            if prompt is None and output is None:
                continue
            record = _base(table, key, index, i, row_step, True, "eval")
            record.update(_chat(_value(prompt), _value(output)))
            _set(record, "reward", _number(row[at(f"score_{i}")]))
            out.append(record)
    return out


def _nemo_gym(table: _Table, step: int | None, key: str) -> list[Record] | None:
    # NeMo-RL's `{agent}/full_result` (nemo_rl/experience/rollouts.py): json.dumps of a NeMo
    # Gym verify response ({responses_create_params, response, reward, ...}) a row.
    parts = key.split("/")
    env = parts[-2] if len(parts) >= 2 else None
    out = []
    for index, row in enumerate(table.rows):
        result = _json(row[0])
        if not isinstance(result, Mapping) or not ("response" in result or "reward" in result):
            continue
        params = result.get("responses_create_params")
        params = params if isinstance(params, Mapping) else {}
        response = result.get("response")
        response = response if isinstance(response, Mapping) else {}
        messages = []
        if isinstance(params.get("instructions"), str):
            messages.append({"role": "system", "content": params["instructions"]})
        messages += responses_messages(params.get("input"))
        messages += [{**m, "sampled": True} for m in responses_messages(response.get("output"))]
        record = _base(table, key, index, 0, step, False, _kind(key))
        record["messages"] = messages
        _set(record, "reward", _number(result.get("reward")))
        _set(record, "env", env)
        rest = {k: v for k, v in result.items() if k not in ("response", "responses_create_params")}
        _set(record, "info", clean_finite({k: v for k, v in rest.items() if k != "reward"}) or None)
        out.append(record)
    return out or None


def _columns(table: _Table, step: int | None, key: str) -> list[Record] | None:
    find = table.find
    step_at, prompt_at, reply_at, text_at = find(_STEP), find(_PROMPT), find(_REPLY), find(_TEXT)
    reward_at = find(_REWARD)
    if reply_at is None:
        if text_at is None or (prompt_at is None and reward_at is None):
            return None
        reply_at = text_at
    roles = {
        i: role
        for role, i in (
            ("step", step_at),
            ("prompt", prompt_at),
            ("reply", reply_at),
            ("reward", reward_at),
            ("advantage", find(_ADVANTAGE)),
            ("answer", find(_ANSWER)),
            ("env", find(_ENV)),
            ("task", find(("task",))),
            ("tokens", find(_TOKENS)),
        )
        if i is not None
    }
    media = {i for i in range(len(table.columns)) if i not in roles and _holds_media(table, i)}
    numeric = {i for i in range(len(table.columns)) if i not in roles and _numeric(table, i)}
    # Without a reward column, the table's numbers are its reward functions' scores (TRL: one
    # column per reward function, combined with weight 1 by default); counts stay metrics.
    components = (
        set()
        if reward_at is not None
        else {i for i in numeric if not _COUNT.search(table.names[i])}
    )
    kind = _kind(key)
    out = []
    for index, row in enumerate(table.rows):
        row_step = _step(row[step_at], step) if step_at is not None else step
        record = _base(table, key, index, 0, row_step, step_at is not None, kind)
        prompt = _value(row[prompt_at]) if prompt_at is not None else None
        record.update(_chat(prompt, _value(row[reply_at])))
        _add_images(record, [ref for i in sorted(media) for ref in media_refs(row[i])])
        if reward_at is not None:
            _set(record, "reward", _number(row[reward_at]))
        elif components:
            scores = {table.columns[i]: _number(row[i]) for i in sorted(components)}
            record["rewards"] = {
                k: None if v is None else {"score": v, "weight": 1.0} for k, v in scores.items()
            }
            known = [v for v in scores.values() if v is not None]
            _set(record, "reward", sum(known) if known else None)
        metrics = {table.columns[i]: _number(row[i]) for i in sorted(numeric - components)}
        for i, role in roles.items():
            if role == "advantage":
                metrics[table.columns[i]] = _number(row[i])
            elif role == "answer" and row[i] is not None:
                record["answer"] = row[i] if isinstance(row[i], str) else _text_of(row[i])
            elif role == "env" and isinstance(row[i], str) and row[i]:
                record["env"] = row[i]
            elif role == "task":
                task = _json(row[i])
                record["task"] = {"data": task} if isinstance(task, Mapping) else row[i]
            elif role == "tokens":
                _set(record, "token_ids", _token_ids(row[i]))
        _set(record, "metrics", {k: v for k, v in metrics.items() if v is not None} or None)
        skip = set(roles) | media | numeric
        info = {
            table.columns[i]: row[i]
            for i in range(len(row))
            if i not in skip and row[i] is not None
        }
        _set(record, "info", clean_finite(info) or None)
        out.append(record)
    return out


# -- one record ------------------------------------------------------------------------------


def _base(
    table: _Table, key: str, index: int, sample: int, step: int | None, has_step: bool, kind: str
) -> Record:
    record: Record = {"id": table.episode_id(key, index, sample, step, has_step)}
    _set(record, "step", step)
    record["kind"] = kind
    record["wandb"] = {"table": key, "row": index, **({"sample": sample} if sample else {})}
    return record


def _chat(prompt: Any, reply: Any) -> Record:
    """The chat fields of a prompt and a reply: each a string, or messages when it is a list
    of messages or a decoded chat template (a whole conversation in the reply: `messages`)."""
    prompt_messages = _as_messages(prompt, "user")
    reply_messages = _as_messages(reply, "assistant")
    if isinstance(reply, str) and reply_messages is not None and prompt is None:
        return {"messages": reply_messages}  # a whole decoded conversation
    out: Record = {}
    if prompt is not None:
        out["prompt"] = prompt_messages if prompt_messages is not None else prompt
    if reply is not None:
        out["completion"] = reply_messages if reply_messages is not None else reply
    return out


def _as_messages(value: Any, role: str) -> list[Any] | None:
    if isinstance(value, str):
        return chat_template_messages(value)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in value)
    ):
        return value
    return None


def _add_images(record: Record, refs: list[Any]) -> None:
    """Images go first in the first user message (TRL logs the prompt's images)."""
    if not refs:
        return
    parts = [image_part(ref) for ref in refs]
    for field in ("prompt", "messages"):
        value = record.get(field)
        if isinstance(value, str):
            record[field] = [{"role": "user", "content": [*parts, {"type": "text", "text": value}]}]
            return
        if isinstance(value, list):
            for i, message in enumerate(value):
                if message.get("role") == "user":
                    content = message.get("content")
                    text = (
                        [{"type": "text", "text": content}]
                        if isinstance(content, str)
                        else content or []
                    )
                    value[i] = {**message, "content": [*parts, *text]}
                    return
    record["prompt"] = [{"role": "user", "content": parts}]


def _set(record: Record, field: str, value: Any) -> None:
    if value is not None:
        record[field] = value


# -- cells -----------------------------------------------------------------------------------


def _value(cell: Any) -> Any:
    """A prompt or reply cell: text, a message list, or None (missing, or media)."""
    if cell is None or (isinstance(cell, float) and not math.isfinite(cell)) or cell == "":
        return None
    if isinstance(cell, (str, list)):
        return cell
    return _text_of(cell)


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(clean_finite(value)).decode()


def _number(cell: Any) -> float | None:
    if isinstance(cell, bool) or not isinstance(cell, (int, float)):
        return None
    return float(cell) if math.isfinite(cell) else None


def _step(cell: Any, fallback: int | None) -> int | None:
    """A step column's value (an int, an integral float, or digits: TRL's callback logs
    str(step)), else the table's own step."""
    text_step = isinstance(cell, str) and cell.strip().isdigit()
    if text_step or (isinstance(cell, float) and cell.is_integer()):
        cell = int(cell)
    return cell if _is_int(cell) and 0 <= cell <= MAX_STEP else fallback


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _numeric(table: _Table, column: int) -> bool:
    """Every non-missing cell of the column is a number, and there is one."""
    seen = False
    for row in table.rows:
        cell = row[column]
        if cell is None or (isinstance(cell, float) and not math.isfinite(cell)):
            continue
        if isinstance(cell, bool) or not isinstance(cell, (int, float)):
            return False
        seen = True
    return seen


def _holds_media(table: _Table, column: int) -> bool:
    return any(media_refs(row[column]) for row in table.rows)


def _json(cell: Any) -> Any:
    """A cell holding a JSON document (NeMo-RL's full results, prime-rl's task): its value;
    stdlib json, since the frameworks' json.dumps writes NaN."""
    if not isinstance(cell, str):
        return cell
    try:
        return json.loads(cell)
    except ValueError:
        return None


def _token_ids(cell: Any) -> list[int] | None:
    """prime-rl logs `str(token_ids)`; kept as a list of ints, which search and previews skip."""
    ids = _json(cell)
    if isinstance(ids, list) and all(_is_int(i) for i in ids):
        return ids
    return None


def _kind(key: str) -> str:
    parts = {p.lower() for p in key.split("/")}
    return "eval" if parts & _EVAL_PARTS else "train"
