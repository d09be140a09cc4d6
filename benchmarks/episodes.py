"""
Production-sized synthetic episodes for load tests (monitors, online uploads).

Sizes follow a lognormal fitted to production RL episodes: median 6.4 MB, p90 17 MB (so mean
~8.5 MB and p99 ~35 MB), capped at 60 MB. An episode of size S is built from shared traces at
log-spaced sizes (64 KB * 2**k, k = 0..9): the binary digits of S / 64 KB pick which ones, so
any size up to 64 MB is met within 64 KB while the generator holds only ~64 MB of distinct
traces, however many episodes it yields.

The traces look like verifiers `Trace.to_record()` output (~24 bytes of JSON per token: message
text, token ids, sampled mask, 4-decimal logprobs), with per-token values drawn from pools of
shared Python objects so their memory is close to their JSON size, and random enough that zstd
compresses them about as much as real records (~3x), not the 100x a repeated block would give.

    factory = EpisodeFactory(seed=0)
    for i, size in enumerate(factory.sizes(1000)):
        episode = factory.episode(i, size, step=i // 16)   # a dict; len(json) ~= size
"""

from __future__ import annotations

import math
import random
import uuid
from typing import Any

import orjson

__all__ = ["CAP_BYTES", "EpisodeFactory", "MEDIAN_BYTES", "P90_BYTES", "UNIT_BYTES"]

MEDIAN_BYTES = 6.4e6
P90_BYTES = 17e6
CAP_BYTES = 60e6
UNIT_BYTES = 64 * 1024  # the smallest shared trace; trace k is UNIT_BYTES * 2**k
TRACE_LEVELS = 10  # 64 KB .. 32 MB: sums reach 64 MB > CAP_BYTES
_Z90 = 1.2815515655446004  # standard normal quantile at 0.90
_NODE_TOKENS = 680  # ~16 KB of JSON per message node
_TEXT = (
    "the of and to in is that for it as with was on be by at this are from or an have not "
    "which but all were when we there can more if will one about so what their would up out "
    "function return value step reward token model answer compute check result error tool call "
    "search query file line test pass fail retry think solve given therefore because"
)
_WORDS = _TEXT.split(" ")


class EpisodeFactory:
    """Deterministic episodes (for a seed) at production sizes; see the module docstring."""

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)
        self._mu = math.log(MEDIAN_BYTES)
        self._sigma = math.log(P90_BYTES / MEDIAN_BYTES) / _Z90
        pool_rng = random.Random(seed + 1)
        self._token_ids = [pool_rng.randrange(151_000) for _ in range(4096)]
        self._logprobs = [round(-abs(pool_rng.gauss(0, 1.5)), 4) for _ in range(2048)]
        self._traces = [self._make_trace(k, pool_rng) for k in range(TRACE_LEVELS)]
        self._trace_bytes = [UNIT_BYTES << k for k in range(TRACE_LEVELS)]

    def sizes(self, n: int) -> list[int]:
        """`n` target sizes in bytes: lognormal(median 6.4 MB, p90 17 MB), capped at 60 MB."""
        return [
            int(min(CAP_BYTES, self._rng.lognormvariate(self._mu, self._sigma))) for _ in range(n)
        ]

    def episode(self, index: int, size: int, step: int = 0) -> dict[str, Any]:
        """An episode of about `size` bytes of JSON (at least one 64 KB trace)."""
        units = max(1, round(size / UNIT_BYTES))
        traces = [self._traces[k] for k in range(TRACE_LEVELS) if units >> k & 1]
        if not traces:  # beyond 64 MB: not produced by sizes(), which caps at 60 MB
            traces = list(self._traces)
        tokens = sum(t["num_total_tokens"] for t in traces)
        env = ("math", "code", "search")[index % 3]
        return {
            "id": uuid.UUID(int=self._rng.getrandbits(128)).hex,
            "env": {"id": env, "name": env},
            "group": {"id": f"group-{index // 8}"},
            "run": {"type": "train", "work": {"type": "train", "step": step}},
            "ok": index % 17 != 0,
            "reward": round(self._rng.random(), 4),
            "errors": [],
            "traces": traces,
            "num_total_tokens": tokens,
        }

    def trace_bytes(self) -> list[int]:
        """Nominal JSON size of each shared trace, smallest first."""
        return list(self._trace_bytes)

    def _make_trace(self, level: int, rng: random.Random) -> dict[str, Any]:
        target = UNIT_BYTES << level
        nodes: list[dict[str, Any]] = []
        size = 0
        while size < target - 1_000:
            node = self._make_node(len(nodes), rng, min(_NODE_TOKENS, (target - size) // 24 + 1))
            nodes.append(node)
            size += len(orjson.dumps(node)) + 1
        tokens = sum(len(n["token_ids"]) for n in nodes)
        return {
            "version": 1,
            "id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "agent": {"name": "agent", "trainable": True, "config": {"model": "bench-policy"}},
            "task": {"type": "Task", "data": {"idx": level, "prompt": "synthetic"}},
            "nodes": nodes,
            "rewards": {"correct": {"score": 1.0, "weight": 1.0}},
            "timing": {
                "start": 1_790_000_000.0,
                "agent": {"start": 1_790_000_000.5, "end": 1_790_000_030.0},
            },
            "ok": True,
            "num_total_tokens": tokens,
        }

    def _make_node(self, index: int, rng: random.Random, tokens: int) -> dict[str, Any]:
        words = rng.choices(_WORDS, k=tokens)
        content = " ".join(words)
        token_ids = rng.choices(self._token_ids, k=tokens)
        sampled = index % 2 == 1
        logprobs = rng.choices(self._logprobs, k=tokens) if sampled else []
        mask = [sampled] * tokens
        return {
            "parent": index - 1 if index else None,
            "message": {"role": "assistant" if sampled else "user", "content": content},
            "sampled": sampled,
            "token_ids": token_ids,
            "mask": mask,
            "logprobs": logprobs,
        }
