"""
The retention policy as the server's settings give it (issue 22), and the sample it keeps.
Standard library only: config.py imports it, and `openruns --help` stays cheap.

    rules = parse_rules(from_file.get("retention"), "retention in server.toml")
    rule = rule_for(rules, team_id="rl", project="grpo")   # the most specific match, or None
    kept = sample(rows, rule.keep_per_step)                  # the seqs of the episodes kept

A rule is one `[[retention]]` entry of the config file: `team` and `project` (both optional,
each narrowing what it matches), `after_days` (required, > 0: a run ended longer ago than this
is reduced) and `keep_per_step` (how many episodes of each (stream, kind, step) stay). The
most specific entry matching a run wins: team and project, then team, then project, then an
entry naming neither; two entries of the same scope are refused.

The sample (docs/decisions.md, "Retention keeps a deterministic sample"): per (stream, kind,
step), the episode with the best reward and the one with the worst (rewards that are not null;
ties go to the lower hash), then the rest in order of the BLAKE2b hash of their id, lowest
first, until `keep_per_step`. It depends on the ids and rewards only, never on the order rows
are read in or on randomness, so a second pass (or another replica) keeps the same set, and a
pass over an already reduced run drops nothing more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_KEEP_PER_STEP",
    "EpisodeRow",
    "RetentionRule",
    "RuleError",
    "id_hash",
    "parse_rules",
    "rule_for",
    "sample",
]

DEFAULT_KEEP_PER_STEP = 8
_KEYS = ("team", "project", "after_days", "keep_per_step")


class RuleError(ValueError):
    """A retention entry that cannot be used; the message names the entry and the key."""


@dataclass(frozen=True)
class RetentionRule:
    """Runs of `team` / `project` (None: any) ended more than `after_days` ago keep
    `keep_per_step` episodes per (stream, kind, step)."""

    after_days: float
    keep_per_step: int = DEFAULT_KEEP_PER_STEP
    team: str | None = None
    project: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.after_days, bool) or not self.after_days > 0:
            raise RuleError(f"after_days must be a number of days > 0, got {self.after_days!r}")
        if type(self.keep_per_step) is not int or self.keep_per_step < 1:
            raise RuleError(f"keep_per_step must be an integer >= 1, got {self.keep_per_step!r}")

    @property
    def after_seconds(self) -> float:
        return self.after_days * 86400.0

    @property
    def specificity(self) -> int:
        """team+project 3, team 2, project 1, neither 0: the more specific wins."""
        return (2 if self.team is not None else 0) + (1 if self.project is not None else 0)

    def matches(self, team_id: str, project: str | None) -> bool:
        return (self.team is None or self.team == team_id) and (
            self.project is None or self.project == project
        )

    def describe(self) -> dict[str, Any]:
        """The rule as the API and the run's record show it."""
        return {
            "team": self.team,
            "project": self.project,
            "after_days": self.after_days,
            "keep_per_step": self.keep_per_step,
        }


def parse_rules(
    entries: Any, source: str, default_keep: int = DEFAULT_KEEP_PER_STEP
) -> tuple[RetentionRule, ...]:
    """The rules of the config file's `[[retention]]` entries (None: none); RuleError names
    the entry (`source`, its number from 1) and the key. An entry without keep_per_step keeps
    `default_keep`."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise RuleError(f"{source}: expected [[retention]] entries (a list of tables)")
    rules: list[RetentionRule] = []
    for number, entry in enumerate(entries, 1):
        where = f"{source}, entry {number}"
        if not isinstance(entry, Mapping):
            raise RuleError(f"{where}: expected a table with after_days, got {entry!r}")
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise RuleError(f"{where}: unknown keys {unknown}; known keys are {list(_KEYS)}")
        if "after_days" not in entry:
            raise RuleError(f"{where}: after_days is required (days after a run ended)")
        after = entry["after_days"]
        if isinstance(after, bool) or not isinstance(after, int | float) or not after > 0:
            raise RuleError(f"{where}: after_days must be a number of days > 0, got {after!r}")
        keep = entry.get("keep_per_step", default_keep)
        if type(keep) is not int or keep < 1:
            raise RuleError(f"{where}: keep_per_step must be an integer >= 1, got {keep!r}")
        for key in ("team", "project"):
            value = entry.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                raise RuleError(f"{where}: {key} must be a non-empty string, got {value!r}")
        rules.append(RetentionRule(float(after), keep, entry.get("team"), entry.get("project")))
    seen: dict[tuple[str | None, str | None], int] = {}
    for number, rule in enumerate(rules, 1):
        scope = (rule.team, rule.project)
        if scope in seen:
            raise RuleError(
                f"{source}, entry {number}: same team and project as entry {seen[scope]} "
                f"({_scope_text(rule)}); keep one"
            )
        seen[scope] = number
    return tuple(rules)


def _scope_text(rule: RetentionRule) -> str:
    parts = [
        f"team {rule.team!r}" if rule.team else "",
        f"project {rule.project!r}" if rule.project else "",
    ]
    return " and ".join(p for p in parts if p) or "every run"


def rule_for(
    rules: Iterable[RetentionRule], team_id: str, project: str | None
) -> RetentionRule | None:
    """The most specific rule matching a run of `team_id` / `project`; None when none does."""
    best: RetentionRule | None = None
    for rule in rules:
        if rule.matches(team_id, project) and (best is None or rule.specificity > best.specificity):
            best = rule
    return best


class EpisodeRow(NamedTuple):
    """What the sample reads of an index row."""

    seq: int
    stream: str
    kind: str | None
    step: int | None
    episode_id: str
    reward: float | None


def id_hash(episode_id: str) -> bytes:
    """The order of the sample's random part: BLAKE2b-64 of the id."""
    return hashlib.blake2b(episode_id.encode(), digest_size=8).digest()


def sample(rows: Sequence[EpisodeRow], keep_per_step: int) -> set[int]:
    """The seqs of the rows kept: per (stream, kind, step), the best and the worst reward,
    then the lowest hashes of the id, up to `keep_per_step` (all of a smaller group)."""
    groups: dict[tuple[str, str | None, int | None], list[EpisodeRow]] = {}
    for row in rows:
        groups.setdefault((row.stream, row.kind, row.step), []).append(row)
    kept: set[int] = set()
    for group in groups.values():
        if len(group) <= keep_per_step:
            kept.update(row.seq for row in group)
            continue
        # Hash order, lowest first; the seq breaks a tie of two equal ids (none in one stream).
        by_hash = sorted(group, key=lambda r: (id_hash(r.episode_id), r.seq))
        chosen: list[int] = []
        rewarded = [r for r in by_hash if r.reward is not None]
        if rewarded:
            # max/min keep the first of equals: the lowest hash among equal rewards.
            best = max(rewarded, key=lambda r: r.reward if r.reward is not None else 0.0)
            worst = min(rewarded, key=lambda r: r.reward if r.reward is not None else 0.0)
            chosen.append(best.seq)
            if worst.seq != best.seq and keep_per_step > 1:
                chosen.append(worst.seq)
        for row in by_hash:
            if len(chosen) >= keep_per_step:
                break
            if row.seq not in chosen:
                chosen.append(row.seq)
        kept.update(chosen)
    return kept
