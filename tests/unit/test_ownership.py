"""The ownership rule (ownership.decide), case by case as the seeds name them (issue 23)."""

from __future__ import annotations

import pytest

from openruns.ownership import Decision, Ownership, decide

OWNER, COMPLETES, ATTACHED = Ownership.OWNER, Ownership.COMPLETES, Ownership.ATTACHED

# (case, id=, kind, exported by another process, ids the environment names, rank) -> decision
CASES = [
    # seed 002: a process that creates its run owns it
    ("a plain init() creates and owns", None, "eval", None, set(), None, Decision(None, OWNER)),
    # seed 002: a second init() in the process that exported OPENRUNS_RUN_ID opens a new run
    ("re-init in the exporting process", None, "eval", None, {"r1"}, None, Decision(None, OWNER)),
    # seed 000: components started by the launcher (or a scheduler's export) attach, only flush
    (
        "a launched component",
        None,
        "train",
        "r1",
        {"r1"},
        None,
        Decision("r1", ATTACHED, inherited=True),
    ),
    # seed 000: "each component's prime monitor attaches to" the RUN_ID the platform passes
    ("hosted pod: id=$RUN_ID", "h1", "train", None, {"h1"}, None, Decision("h1", ATTACHED)),
    ("hosted pod: an eval id=$RUN_ID", "h1", "eval", None, {"h1"}, None, Decision("h1", ATTACHED)),
    # RUN_ID alone is never read: other tools set it
    ("RUN_ID set, no id=", None, "train", None, {"h1"}, None, Decision(None, OWNER)),
    # seed 000 under a launcher: prime-rl's init(kind="train", id=$RUN_ID) only flushes
    (
        "launcher + id=$RUN_ID",
        "r1",
        "train",
        "r1",
        {"r1"},
        None,
        Decision("r1", ATTACHED, inherited=True),
    ),
    # an id= naming the process's own exported run: that run belongs to its first Run object
    ("id= of this process's run", "r1", "eval", None, {"r1"}, None, Decision("r1", ATTACHED)),
    # seed 002: an explicit id is a deliberate resume and finalizes
    ("explicit id= resumes", "x9", "eval", None, set(), None, Decision("x9", OWNER)),
    ("explicit id= beside another run", "x9", "eval", "r1", {"r1"}, None, Decision("x9", OWNER)),
    # seed 002 (prime-rl's contract): a clean finish completes, failures go to the creator
    ("explicit train id=", "x9", "train", None, set(), None, Decision("x9", COMPLETES)),
    # ranks: non-zero ranks never create and never finalize
    (
        "rank with a run to join",
        None,
        "train",
        "r1",
        {"r1"},
        "RANK=3",
        Decision("r1", ATTACHED, inherited=True),
    ),
    ("rank with an id=", "x9", "train", None, set(), "LOCAL_RANK=1", Decision("x9", ATTACHED)),
    (
        "rank without a run",
        None,
        "train",
        None,
        set(),
        "DP_RANK=2",
        Decision(None, OWNER, discard=True),
    ),
    (
        "rank, RUN_ID only",
        None,
        "train",
        None,
        {"h1"},
        "RANK=1",
        Decision(None, OWNER, discard=True),
    ),
]


@pytest.mark.parametrize(
    ("id", "kind", "exported", "env_ids", "rank", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_ownership_rule(id, kind, exported, env_ids, rank, expected):
    assert decide(id=id, kind=kind, exported=exported, env_ids=env_ids, rank=rank) == expected
