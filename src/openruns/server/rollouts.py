"""
What a reader sees of a stored record, read from the record itself: its text (for the search
index and the snippets of a search hit) and a preview (the first user message and the final
answer, for the step page).

Records come in several shapes and all are read the same way:

- verifiers episodes (`traces[].nodes[].message`) and bare traces (`nodes[].message`);
- message lists under `messages` (OpenAI chat) or `prompt` / `completion` (verifiers rollouts,
  TRL), with `tool_calls` and `tool` results;
- plain strings under `prompt` / `completion` / `answer` / `question` / `response`;
- anything else: its strings, and no preview.

    text = record_text(record)        # [(label, text)]: a role, "tool call", "error", or a key
    preview = record_preview(record)  # {"prompt", "reply", "answer", "turns", "trace_rewards"}
    hits = snippets(text, Query.parse('timeout "sandbox error"'))

`load_records` reads the records of index rows from their segments, each zstd frame once,
verified as every read is (segment_reads.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..records import trace_reward
from .segment_reads import DamagedSegment, Location, RecordReader
from .store.blobs import BlobStore

__all__ = [
    "MAX_TEXT_CHARS",
    "Location",
    "Query",
    "load_records",
    "parse",
    "record_preview",
    "record_text",
    "snippets",
]

# Text of one record kept for the index and for snippets: a 50k-token transcript is ~200 KB; a
# record with more text than this is indexed by its first MAX_TEXT_CHARS (docs/decisions.md).
MAX_TEXT_CHARS = 1_000_000
PREVIEW_CHARS = 300
SNIPPET_CHARS = 90  # of context on each side of a match
# Per-token and binary fields: numbers or payloads, never text a reader searches.
_SKIP_KEYS = frozenset(
    {
        "token_ids",
        "mask",
        "logprobs",
        "advantages",
        "reference_logprobs",
        "trainer_logprobs",
        "entropies",
        "loss_weights",
        "routed_experts",
        "sampling_mask",
        "kept_tokens",
        "is_content",
        "multi_modal_data",
        "mm_token_type_id_map",
        "image_url",
        "input_audio",
    }
)
_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})
# Labels that hold for everything below them.
_STICKY = _ROLES | {"tool call", "error"}
_MESSAGE_LISTS = ("messages", "prompt", "completion")
_PROMPT_KEYS = ("prompt", "question", "input", "query", "instruction")
_REPLY_KEYS = ("completion", "response", "output", "generation")


# -- text -----------------------------------------------------------------------------------


def record_text(record: Any, limit: int = MAX_TEXT_CHARS) -> list[tuple[str, str]]:
    """Every distinct string of the record, labelled with what it is (the role of the message
    it is in, "tool call", "error", else its key), up to `limit` characters in all."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    budget = limit

    def add(label: str, text: str) -> None:
        nonlocal budget
        if budget <= 0 or not text or text in seen or text.startswith("data:"):
            return
        seen.add(text)
        text = text[:budget]
        budget -= len(text)
        out.append((label, text))

    def walk(value: Any, label: str) -> None:
        if budget <= 0:
            return
        if isinstance(value, str):
            add(label, value)
        elif isinstance(value, Mapping):
            role = value.get("role")
            if isinstance(role, str) and "content" in value:
                label = role
            for key, item in value.items():
                if key in _SKIP_KEYS or key == "role" or item is None:
                    continue  # the role is the label, not text
                if isinstance(item, (int, float, bool)):
                    continue
                if key in ("tool_calls", "function_call"):
                    walk(item, "tool call")
                elif key in ("errors", "error", "traceback"):
                    walk(item, "error")
                elif key in ("content", "text", "arguments", "function", "name"):
                    walk(item, label)
                else:
                    walk(item, label if label in _STICKY else str(key))
        elif isinstance(value, list):
            # A list of numbers (token ids, logprobs) holds no text: skipped without a walk.
            if value and isinstance(value[0], (int, float)):
                return
            for item in value:
                walk(item, label)

    walk(record, "record")
    return out


# -- preview --------------------------------------------------------------------------------


def record_preview(record: Any) -> dict[str, Any]:
    """Excerpts of at most PREVIEW_CHARS: "prompt" (the first user message, else the task's
    prompt: an episode that failed before any trace has only its task), "reply" (the final
    assistant message), "answer" (the expected answer), and "turns" (assistant messages);
    each only when the record has it, {} when it is not a chat of a known shape. And, of an
    episode, "trace_rewards": the reward of each of its traces in order, by the index's rule
    (records.trace_reward: `reward`, else score × weight), null where unscored; the episode
    page shows them (issue 24; a bare trace's or a chat's own is its index row's reward)."""
    if not isinstance(record, Mapping):
        return {}
    messages = list(_messages(record))
    out: dict[str, Any] = {}
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    if first_user is not None:
        out["prompt"] = _excerpt(_content_text(first_user.get("content")))
    else:
        text = next((record[k] for k in _PROMPT_KEYS if isinstance(record.get(k), str)), None)
        if text is None:
            text = _task_prompt(record)
        if text is not None:
            out["prompt"] = _excerpt(text)
    replies = [m for m in messages if m.get("role") == "assistant"]
    if replies:
        last = replies[-1]
        text = _content_text(last.get("content"))
        calls = last.get("tool_calls")
        if not text and isinstance(calls, list):
            names = [_call_name(c) for c in calls]
            text = "tool call: " + ", ".join(names)
        out["reply"] = _excerpt(text)
        out["turns"] = len(replies)
    else:
        text = next((record[k] for k in _REPLY_KEYS if isinstance(record.get(k), str)), None)
        if text is not None:
            out["reply"] = _excerpt(text)
    answer = _answer(record)
    if answer is not None:
        out["answer"] = _excerpt(answer)
    out = {k: v for k, v in out.items() if v != ""}
    traces = record.get("traces")
    if isinstance(traces, list):
        out["trace_rewards"] = [trace_reward(t) if isinstance(t, Mapping) else None for t in traces]
    return out


def _messages(record: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The record's messages in order: an episode's summary trace's (its first trainable
    trace, else its first), a trace's nodes, else its message lists."""
    traces = record.get("traces")
    if isinstance(traces, list):
        mappings = [t for t in traces if isinstance(t, Mapping)]
        trainable = [t for t in mappings if _trainable(t)]
        if trainable or mappings:
            yield from _messages((trainable or mappings)[0])
        return
    nodes = record.get("nodes")
    if isinstance(nodes, list):
        for node in nodes:
            if isinstance(node, Mapping) and isinstance(node.get("message"), Mapping):
                yield node["message"]
        return
    for key in _MESSAGE_LISTS:
        value = record.get(key)
        if isinstance(value, list):
            for m in value:
                if isinstance(m, Mapping) and isinstance(m.get("role"), str):
                    yield m


def _trainable(trace: Mapping[str, Any]) -> bool:
    agent = trace.get("agent")
    return not (isinstance(agent, Mapping) and agent.get("trainable") is False)


def _call_name(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return str(name or "?")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _answer(record: Mapping[str, Any]) -> str | None:
    """The expected answer: the record's `answer`, else its task's."""
    answer = record.get("answer")
    if answer is None:
        task = record.get("task")
        data = task.get("data") if isinstance(task, Mapping) else None
        answer = data.get("answer") if isinstance(data, Mapping) else None
    if answer is None or isinstance(answer, (Mapping, list)):
        return None
    return str(answer)


def _task_prompt(record: Mapping[str, Any]) -> str | None:
    """The prompt of the record's task (`task.data.prompt`, as verifiers dispatches it): its
    text, or its first user message's."""
    task = record.get("task")
    data = task.get("data") if isinstance(task, Mapping) else None
    prompt = data.get("prompt") if isinstance(data, Mapping) else None
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for m in prompt:
            if isinstance(m, Mapping) and m.get("role") == "user":
                return _content_text(m.get("content"))
    return None


def _excerpt(text: str) -> str:
    text = " ".join(text[: PREVIEW_CHARS * 4].split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


# -- queries and snippets -------------------------------------------------------------------

# A word as the index's tokenizer sees one: letters and digits (an underscore separates).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Query:
    """A search as a reader types it: words (all must match), "quoted phrases", and words
    ending in * (prefixes). Nothing else is an operator, so no input is a syntax error.
    `terms[i]` holds the words of term i (several for a phrase)."""

    terms: tuple[tuple[str, ...], ...]
    prefix: tuple[bool, ...]

    @classmethod
    def parse(cls, text: str) -> Query:
        terms: list[tuple[str, ...]] = []
        prefix: list[bool] = []
        for phrase, word in re.findall(r'"([^"]*)"|(\S+)', text):
            words = tuple(w.lower() for w in _WORD.findall(phrase or word))
            if words and (words, word.endswith("*")) not in zip(terms, prefix, strict=True):
                terms.append(words)
                prefix.append(bool(word) and word.endswith("*"))
        return cls(tuple(terms), tuple(prefix))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def pattern(self) -> re.Pattern[str]:
        """A regex of any term as the index matches it: case-insensitive whole words (a
        prefix term: the start of a word), a phrase's words in order."""
        parts = []
        for words, star in zip(self.terms, self.prefix, strict=True):
            body = r"[\W_]+".join(re.escape(w) for w in words)
            parts.append(rf"(?<![^\W_]){body}" + ("" if star else r"(?![^\W_])"))
        return re.compile("|".join(parts), re.IGNORECASE)


def snippets(text: Iterable[tuple[str, str]], query: Query, limit: int = 3) -> list[dict[str, Any]]:
    """Up to `limit` excerpts around matches, {"label", "text", "matches": [[start, end]]},
    with the offsets of the matches inside the excerpt's text, so a page highlights them
    without parsing HTML."""
    pattern = query.pattern()
    out: list[dict[str, Any]] = []
    for label, body in text:
        covered = 0  # matches before this offset are inside the previous excerpt
        for match in pattern.finditer(body):
            if match.start() < covered:
                continue
            start = max(0, match.start() - SNIPPET_CHARS)
            end = min(len(body), match.end() + SNIPPET_CHARS)
            lead = "…" if start else ""
            matches = [
                [m.start() - start + len(lead), m.end() - start + len(lead)]
                for m in pattern.finditer(body, start, end)
            ]
            tail = "…" if end < len(body) else ""
            out.append({"label": label, "text": lead + body[start:end] + tail, "matches": matches})
            covered = end
            if len(out) >= limit:
                return out
    return out


# -- loading --------------------------------------------------------------------------------


def load_records(blobs: BlobStore, locations: Iterable[Location]) -> list[bytes]:
    """The records' JSON, in the order given, each verified as every read is (segment_reads);
    each group of frames is read and decompressed once, and one is held at a time; a record of
    a damaged segment is b"" (it parses as None: no preview, no text). Blocking: call from a
    worker thread."""
    wanted = list(locations)
    out = [b""] * len(wanted)
    reader = RecordReader(blobs)
    for i in sorted(range(len(wanted)), key=lambda i: (wanted[i].blob_key, wanted[i].frame_offset)):
        try:
            out[i] = reader.record(wanted[i])
        except DamagedSegment:
            pass  # a damaged segment: its records read as empty, left out
    return out


def parse(record: bytes) -> Any:
    """A record's JSON value, or None when it does not parse."""
    try:
        return orjson.loads(record)
    except orjson.JSONDecodeError:
        return None
