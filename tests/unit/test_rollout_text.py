"""What a reader sees of a record, without a server: text, previews, queries, snippets."""

from __future__ import annotations

import random

from openruns.demo import make_episode
from openruns.server.rollouts import Query, record_preview, record_text, snippets

OPENAI = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18 C, drizzle"},
        {"role": "assistant", "content": "18 degrees and drizzling."},
    ]
}


def test_text_is_labelled_by_role_tool_call_and_error_and_skips_token_arrays():
    episode = make_episode(random.Random(0), 3, 0.5, "train")
    node = episode["traces"][0]["nodes"][1]
    node["token_ids"] = list(range(1000))
    node["multi_modal_data"] = [{"pixels": "PAYLOAD"}]
    node["message"]["content"] = [
        {"type": "text", "text": node["message"]["content"]},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "input_text", "text": "data:text/plain,inline"},
    ]
    episode["errors"] = [{"type": "TimeoutError", "message": "sandbox timed out"}]
    text = record_text(episode)
    labels = {label for label, _ in text}
    assert {"system", "user", "assistant", "tool", "error"} <= labels
    assert any(label == "tool call" and '"expr"' in t for label, t in text)
    assert not any(t in ("user", "assistant") for _, t in text)  # roles are not text
    assert ("error", "sandbox timed out") in text
    assert not any("PAYLOAD" in t or t.startswith("data:") for _, t in text)
    # Every string once, even where the record repeats it (the task on episode and trace).
    assert len([t for _, t in text]) == len({t for _, t in text})


def test_text_is_cut_at_the_limit():
    record = {
        "messages": [
            {"role": "user", "content": "x" * 500},
            {"role": "assistant", "content": "y" * 500},
        ]
    }
    text = record_text(record, limit=600)
    assert sum(len(t) for _, t in text) == 600
    assert text[1] == ("assistant", "y" * 100)


def test_previews_of_every_chat_shape():
    episode = make_episode(random.Random(1), 0, 1.0, "train")
    preview = record_preview(episode)
    assert preview["prompt"].startswith("What is ") and preview["turns"] == 2
    assert preview["reply"].startswith("The answer is")
    assert preview["answer"] == episode["task"]["data"]["answer"]
    # A bare trace: its own nodes.
    assert record_preview(episode["traces"][0])["prompt"] == preview["prompt"]
    assert record_preview(OPENAI) == {
        "prompt": "Weather in Paris?",
        "reply": "18 degrees and drizzling.",
        "turns": 2,
    }
    lists = {
        "prompt": [{"role": "user", "content": [{"type": "text", "text": "Sum 2 and 2"}]}],
        "completion": [{"role": "assistant", "content": "4"}],
        "answer": 4,
    }
    assert record_preview(lists) == {
        "prompt": "Sum 2 and 2",
        "reply": "4",
        "turns": 1,
        "answer": "4",
    }
    plain = {"prompt": "2+2?", "completion": "four", "answer": "4"}
    assert record_preview(plain) == {"prompt": "2+2?", "reply": "four", "answer": "4"}
    assert record_preview({"score": 3, "blob": {"a": 1}}) == {}


def test_an_episode_previews_its_first_trainable_trace():
    judge = {
        "agent": {"name": "judge", "trainable": False},
        "nodes": [{"message": {"role": "user", "content": "judge this"}}],
    }
    solver = {
        "agent": {"name": "solver"},
        "nodes": [{"message": {"role": "user", "content": "solve this"}}],
    }
    assert record_preview({"traces": [judge, solver]})["prompt"] == "solve this"


def test_a_tool_call_only_reply_names_the_tool_and_long_text_is_an_excerpt():
    record = {"messages": [{"role": "user", "content": "word " * 200}, OPENAI["messages"][2]]}
    preview = record_preview(record)
    assert preview["reply"] == "tool call: get_weather"
    assert len(preview["prompt"]) == 300 and preview["prompt"].endswith("…")


def test_queries_parse_words_phrases_and_prefixes_and_never_fail():
    query = Query.parse('Timeout "sandbox error" calc* ""  !!! foo_bar')
    assert query.terms == (("timeout",), ("sandbox", "error"), ("calc",), ("foo", "bar"))
    assert query.prefix == (False, False, True, False)
    assert not Query.parse('"" !!! ...')


def test_snippets_mark_whole_words_and_prefixes_with_their_offsets():
    text = [("user", "The sandbox error came first. " + "filler " * 40 + "Then a calculator call.")]
    found = snippets(text, Query.parse('"sandbox error" calc*'))
    assert len(found) == 2
    for snippet in found:
        for start, end in snippet["matches"]:
            assert snippet["text"][start:end].lower() in ("sandbox error", "calc")
    assert found[1]["text"].startswith("…")
    # "calc" alone is not a whole word of "calculator".
    assert snippets(text, Query.parse("calc")) == []
