"""Retention's pure parts (issue 22): the policy's entries checked, the most specific rule of
a run, the flags' entry, and the deterministic sample kept per (stream, kind, step)."""

from __future__ import annotations

import random

import pytest

from openruns.server.config import ServerConfigError, ServerSettings
from openruns.server.retention_policy import (
    EpisodeRow,
    RetentionRule,
    RuleError,
    id_hash,
    parse_rules,
    rule_for,
    sample,
)


def test_entries_parse_with_their_defaults():
    rules = parse_rules(
        [{"after_days": 30}, {"team": "rl", "after_days": 7, "keep_per_step": 2}], "here"
    )
    assert rules == (RetentionRule(30.0, 8), RetentionRule(7.0, 2, team="rl"))
    assert parse_rules(None, "here") == ()
    assert parse_rules([{"after_days": 1}], "here", default_keep=3)[0].keep_per_step == 3


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"after_days": 3}, "expected \\[\\[retention\\]\\] entries"),
        ([{"team": "rl"}], "entry 1: after_days is required"),
        (
            [{"after_days": 1}, {"after_days": 0}],
            "entry 2: after_days must be a number of days > 0",
        ),
        ([{"after_days": True}], "entry 1: after_days must be"),
        ([{"after_days": "7"}], "entry 1: after_days must be"),
        ([{"after_days": 1, "keep_per_step": 0}], "entry 1: keep_per_step must be an integer"),
        ([{"after_days": 1, "keep_per_step": 2.5}], "entry 1: keep_per_step must be an integer"),
        ([{"after_days": 1, "team": ""}], "entry 1: team must be a non-empty string"),
        ([{"after_days": 1, "days": 3}], "entry 1: unknown keys \\['days'\\]"),
        ([{"after_days": 1, "project": "a"}, {"after_days": 2, "project": "a"}], "entry 2: same"),
        (["x"], "entry 1: expected a table"),
    ],
)
def test_a_bad_entry_is_named_with_its_key(entries, message):
    with pytest.raises(RuleError, match=message):
        parse_rules(entries, "retention in server.toml")


def test_the_most_specific_rule_wins():
    every = RetentionRule(90.0)
    team = RetentionRule(30.0, team="rl")
    project = RetentionRule(60.0, project="grpo")
    both = RetentionRule(7.0, team="rl", project="grpo")
    rules = [both, project, every, team]
    assert rule_for(rules, "rl", "grpo") is both
    assert rule_for(rules, "rl", "other") is team
    assert rule_for(rules, "eval", "grpo") is project
    assert rule_for(rules, "eval", "other") is every
    assert rule_for([team], "eval", "other") is None
    assert rule_for([], "rl", "grpo") is None


def test_settings_read_entries_and_flags(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(
        "retention_keep_per_step = 4\n"
        '[[retention]]\nteam = "rl"\nafter_days = 3\n'
        "[[retention]]\nafter_days = 90\nkeep_per_step = 1\n"
    )
    settings = ServerSettings.resolve({}, {}, config)
    assert settings.retention_rules() == (RetentionRule(3.0, 4, "rl"), RetentionRule(90.0, 1))
    assert settings.retention_interval == 3600.0
    # --retention-days makes the entry for every run, in place of the file's.
    flagged = ServerSettings.resolve({"retention_days": 14.0}, {}, config)
    assert flagged.retention_rules() == (RetentionRule(3.0, 4, "rl"), RetentionRule(14.0, 4))
    env = {"OPENRUNS_RETENTION_DAYS": "2", "OPENRUNS_RETENTION_KEEP_PER_STEP": "5"}
    alone = ServerSettings.resolve({}, env, tmp_path / "none")
    assert alone.retention_rules() == (RetentionRule(2.0, 5),)
    assert ServerSettings.resolve({}, {}, tmp_path / "none").retention_rules() == ()


def test_bad_settings_are_refused_by_name(tmp_path):
    none = tmp_path / "none"
    with pytest.raises(ServerConfigError, match="--retention-interval must be at least 60 s"):
        ServerSettings.resolve({"retention_interval": 5.0}, {}, none)
    with pytest.raises(ServerConfigError, match="--retention-days must be more than 0"):
        ServerSettings.resolve({"retention_days": 0.0}, {}, none)
    with pytest.raises(ServerConfigError, match="--retention-keep-per-step must be at least 1"):
        ServerSettings.resolve({"retention_keep_per_step": 0}, {}, none)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[retention]]\nproject = "a"\nafter_days = -1\n')
    with pytest.raises(ServerConfigError, match=r"retention in .*bad.toml, entry 1: after_days"):
        ServerSettings.resolve({}, {}, bad)


_SEQS = iter(range(1, 1_000_000))


def _group(n: int, step: int = 0, kind: str = "train", stream: str = "episodes"):
    """`n` rows of one (stream, kind, step), rewards 0..16 repeating, fresh seqs."""
    return [
        EpisodeRow(next(_SEQS), stream, kind, step, f"ep-{step}-{i}", float(i % 17))
        for i in range(n)
    ]


def test_the_sample_keeps_best_worst_then_lowest_hashes():
    rows = _group(50)
    kept = sample(rows, 8)
    assert len(kept) == 8
    by_seq = {r.seq: r for r in rows}
    rewards = [r.reward for r in rows if r.reward is not None]
    chosen = [by_seq[s] for s in kept]
    assert max(rewards) in [r.reward for r in chosen]
    assert min(rewards) in [r.reward for r in chosen]
    # Of equal rewards, the best and worst are the lowest hashes.
    best = min((r for r in rows if r.reward == max(rewards)), key=lambda r: id_hash(r.episode_id))
    worst = min((r for r in rows if r.reward == min(rewards)), key=lambda r: id_hash(r.episode_id))
    assert {best.seq, worst.seq} <= kept
    rest = sorted(
        (r for r in rows if r.seq not in (best.seq, worst.seq)), key=lambda r: id_hash(r.episode_id)
    )
    assert kept == {best.seq, worst.seq} | {r.seq for r in rest[:6]}


def test_the_sample_is_the_same_in_any_order_and_again_on_itself():
    rows = _group(40, 1) + _group(40, 2) + _group(40, 2, kind="eval") + _group(3, 3)
    rows += _group(40, 1, stream="traces")
    kept = sample(rows, 5)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert sample(shuffled, 5) == kept
    # 4 groups of 40 keep 5 each; the group of 3 keeps all.
    assert len(kept) == 4 * 5 + 3
    again = [r for r in rows if r.seq in kept]
    assert sample(again, 5) == kept  # a second pass drops nothing more
    # A smaller keep after a larger one keeps a subset of it (a changed rule).
    assert sample(again, 3) <= kept and sample(again, 3) == sample(rows, 3)


def test_rewards_missing_or_a_keep_of_one():
    rows = [EpisodeRow(i, "episodes", None, None, f"e{i}", None) for i in range(20)]
    kept = sample(rows, 4)
    assert kept == {r.seq for r in sorted(rows, key=lambda r: id_hash(r.episode_id))[:4]}
    rewarded = _group(20)
    (only,) = sample(rewarded, 1)
    assert {r.seq: r for r in rewarded}[only].reward == 16.0  # the best alone
