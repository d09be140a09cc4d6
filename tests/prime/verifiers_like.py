"""
Episodes and traces shaped like verifiers 0.4.0's (reference/prime-rl-verifiers.md §4): the
record `to_record()` gives (§4.5) and the attributes prime-runs' projections read (derived
`branches`, `reward`, `is_truncated`, `last_error`, `usage`). verifiers itself pulls in
transformers and an inference stack, so the tests build these pydantic stand-ins instead; the
SDKs duck-type on exactly these names.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Message(_Model):
    role: str
    content: str


class Branch(_Model):
    messages: list[Message]
    num_input_tokens: int
    num_output_tokens: int


class TaskData(_Model):
    idx: int
    prompt: str
    answer: str | None = None


class Task(_Model):
    type: str = "Task"
    data: TaskData


class AgentInfo(_Model):
    config: dict[str, Any] = Field(default_factory=dict)
    name: str = "agent"
    trainable: bool = True


class Reward(_Model):
    score: float
    weight: float = 1.0


class TimeSpan(_Model):
    start: float
    end: float


class Timing(_Model):
    start: float
    setup: TimeSpan | None = None


class Usage(_Model):
    prompt_tokens: int
    completion_tokens: int


class Error(_Model):
    type: str
    message: str


class Node(_Model):
    parent: int | None = None
    message: Message
    sampled: bool
    timestamp: float
    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]


class Call(_Model):
    node: int
    model: str
    finish_reason: str
    usage: Usage
    time: TimeSpan


class Trace(_Model):
    version: int = 1
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    verifiers: dict[str, str] = Field(default_factory=lambda: {"version": "0.4.0"})
    task: Task
    agent: AgentInfo = Field(default_factory=AgentInfo)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    nodes: list[Node]
    calls: list[Call] = Field(default_factory=list)
    rewards: dict[str, Reward | None] = Field(default_factory=dict)
    metrics: dict[str, float | None] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)
    extra_usage: list[Usage] = Field(default_factory=list)
    is_completed: bool = True
    ok: bool = True
    stop_condition: str | None = "done"
    is_timeout: bool = False
    errors: list[Error] = Field(default_factory=list)
    timing: Timing
    run: dict[str, Any] | None = None

    # -- what verifiers derives (not serialized) --------------------------------------------

    @property
    def branches(self) -> list[Branch]:
        """One branch, root to the last node (these traces never fork)."""
        sampled = [n for n in self.nodes if n.sampled]
        return [
            Branch(
                messages=[n.message for n in self.nodes],
                num_input_tokens=sum(len(n.token_ids) for n in self.nodes if not n.sampled),
                num_output_tokens=sum(sum(n.mask) for n in sampled),
            )
        ]

    @property
    def reward(self) -> float | None:
        scored = [r for r in self.rewards.values() if r is not None]
        return sum(r.score * r.weight for r in scored) if scored else None

    @property
    def is_truncated(self) -> bool:
        return self.stop_condition in ("max_turns", "max_output_tokens")

    @property
    def last_error(self) -> Error | None:
        return self.errors[-1] if self.errors else None

    @property
    def usage(self) -> Usage | None:
        if not self.calls:
            return None
        return Usage(
            prompt_tokens=sum(c.usage.prompt_tokens for c in self.calls),
            completion_tokens=sum(c.usage.completion_tokens for c in self.calls),
        )

    def to_record(self) -> dict[str, Any]:
        record = self.model_dump(mode="json", exclude_none=True)
        branch = self.branches[0]
        record["num_input_tokens"] = branch.num_input_tokens
        record["num_output_tokens"] = branch.num_output_tokens
        record["num_total_tokens"] = branch.num_input_tokens + branch.num_output_tokens
        return record


class Env(_Model):
    id: str
    name: str


class Episode(_Model):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    env: Env
    task: Task
    group: dict[str, str] = Field(default_factory=lambda: {"id": str(uuid.uuid4())})
    run: dict[str, Any]
    ok: bool = True
    is_timeout: bool = False
    errors: list[Error] = Field(default_factory=list)
    traces: list[Trace]

    def to_record(self) -> dict[str, Any]:
        record = self.model_dump(mode="json", exclude_none=True, exclude={"traces"})
        record["traces"] = [t.to_record() for t in self.traces]
        totals = [t["num_total_tokens"] for t in record["traces"]]
        record["num_input_tokens"] = sum(t["num_input_tokens"] for t in record["traces"])
        record["num_output_tokens"] = sum(t["num_output_tokens"] for t in record["traces"])
        record["num_total_tokens"] = sum(totals)
        return record


def episode(
    idx: int,
    *,
    step: int | None = None,
    kind: str = "eval",
    reward: float = 1.0,
    judge: bool = False,
    answer_chars: int = 2,
    advantage: float | None = None,
) -> Episode:
    """
    A verifiers-shaped episode: one trainable solver trace (and a non-trainable judge when
    `judge`), task `idx`, the producer's own local run block (`run.work.step` = `step` for
    training work). `answer_chars` sizes the assistant message.
    """
    t0 = 1_790_000_000.0 + idx
    task = Task(data=TaskData(idx=idx, prompt=f"What is {idx}*7?", answer=str(idx * 7)))
    content = (str(idx * 7) * answer_chars)[: max(answer_chars, 1)]
    info: dict[str, Any] = {"kind": kind, "dispatch": {"step": step or 0, "time": t0}}
    if advantage is not None:
        info["advantage"] = advantage

    def trace(name: str, trainable: bool, score: float) -> Trace:
        return Trace(
            task=task,
            agent=AgentInfo(config={"model": "my-policy"}, name=name, trainable=trainable),
            nodes=[
                Node(
                    message=Message(role="user", content=task.data.prompt),
                    sampled=False,
                    timestamp=t0 + 0.1,
                    token_ids=[151644, 872, 198, 3838],
                    mask=[False] * 4,
                    logprobs=[],
                ),
                Node(
                    parent=0,
                    message=Message(role="assistant", content=content),
                    sampled=True,
                    timestamp=t0 + 1.35,
                    token_ids=[151644, 77091, 198, 19, 17, 151645],
                    mask=[False, False, False, True, True, True],
                    logprobs=[-0.0213, -0.0007, -0.0001],
                ),
            ],
            calls=[
                Call(
                    node=1,
                    model="my-policy",
                    finish_reason="stop",
                    usage=Usage(prompt_tokens=4, completion_tokens=3),
                    time=TimeSpan(start=t0 + 0.11, end=t0 + 1.34),
                )
            ],
            rewards={"correct": Reward(score=score)},
            metrics={"parsed": 1.0},
            info=info,
            timing=Timing(start=t0 + 0.05, setup=TimeSpan(start=t0 + 0.06, end=t0 + 0.09)),
        )

    traces = [trace("solver", True, reward)]
    if judge:
        traces.append(trace("judge", False, 1.0))
    run: dict[str, Any] = {"type": kind, "id": "local-producer-id", "name": "my-run"}
    if step is not None:
        run["work"] = {"type": kind, "step": step, "policy": {"start": step, "end": step}}
    return Episode(
        env=Env(id="math-basic", name="math"),
        task=task,
        run=run,
        traces=traces,
    )
