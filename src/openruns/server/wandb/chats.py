"""
Text that frameworks log in their W&B tables, read back as chat messages (issue 19). Pure.

- `chat_template_messages(text)`: a rollout decoded from its token ids with the chat template's
  markers left in (prime-rl's samples table decodes whole sequences: ChatML
  `<|im_start|>role ... <|im_end|>`, or Llama 3 `<|start_header_id|>role<|end_header_id|>`),
  split into messages; None when the text has no such markers.
- `responses_messages(items)`: OpenAI Responses API items (NeMo Gym's verify responses, which
  NeMo-RL logs whole: `responses_create_params.input` and `response.output`) as chat messages:
  messages, function calls (as `tool_calls`), their outputs (as `tool` messages) and reasoning
  (a `reasoning` field of the assistant message it precedes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["chat_template_messages", "responses_messages"]

_CHATML = re.compile(r"<\|im_start\|>([^\n<]*)\n?(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.S)
_LLAMA3 = re.compile(
    r"<\|start_header_id\|>([^<]*)<\|end_header_id\|>\n*(.*?)(?:<\|eot_id\|>|(?=<\|start_header_id\|>)|\Z)",
    re.S,
)
# Special tokens left between or after messages by a decode that kept them.
_SPECIAL = re.compile(r"<\|(?:endoftext|end_of_text|begin_of_text|eot_id|im_end)\|>|</s>|<s>")


def chat_template_messages(text: str) -> list[dict[str, Any]] | None:
    """The messages of a decoded chat-template text, in order, each {"role", "content"}; text
    before the first marker (a prompt without a template) is a user message. None when the
    text holds no ChatML or Llama 3 markers."""
    for pattern, marker in ((_CHATML, "<|im_start|>"), (_LLAMA3, "<|start_header_id|>")):
        if marker not in text:
            continue
        out: list[dict[str, Any]] = []
        head = _SPECIAL.sub("", text[: text.index(marker)]).strip()
        if head:
            out.append({"role": "user", "content": head})
        for match in pattern.finditer(text):
            role = match.group(1).strip() or "unknown"
            out.append({"role": role, "content": _SPECIAL.sub("", match.group(2)).strip()})
        return out
    return None


def responses_messages(items: Any) -> list[dict[str, Any]]:
    """Responses API input or output items as chat messages; a string is one user message.
    Items of other types are kept as a message of their type with the item as JSON."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return []
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append({"role": "user", "content": item})
            continue
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            reasoning.append(_reasoning_text(item))
            continue
        if kind in (None, "message") and isinstance(item.get("role"), str):
            message: dict[str, Any] = {
                "role": item["role"],
                "content": _content(item.get("content")),
            }
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
                continue
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            output = item.get("output")
            message = {
                "role": "tool",
                "tool_call_id": item.get("call_id"),
                "content": output if isinstance(output, str) else _content(output),
            }
        else:
            message = {"role": str(kind or "item"), "content": orjson.dumps(item).decode()}
        if reasoning and message["role"] == "assistant":
            message["reasoning"] = "\n\n".join(r for r in reasoning if r)
            reasoning = []
        out.append(message)
    if reasoning:
        out.append({"role": "assistant", "content": None, "reasoning": "\n\n".join(reasoning)})
    return out


def _content(content: Any) -> Any:
    """Responses content parts as chat content: a string when every part is text, else parts
    ({"type": "text"} and {"type": "image_url"}); a string stays a string."""
    if isinstance(content, str) or content is None:
        return content
    if not isinstance(content, list):
        return orjson.dumps(content).decode()
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif isinstance(part, Mapping):
            if isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            elif part.get("type") == "input_image":
                url = part.get("image_url")
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:
                parts.append(dict(part))
    if all(p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _reasoning_text(item: Mapping[str, Any]) -> str:
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key)
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)
