"""The team a call acts in (auth.acting_team): one rule for the native create, alert rules,
the Prime wire and the W&B wire's entity."""

from __future__ import annotations

import pytest

from openruns.server.auth import ANONYMOUS, Principal, acting_team
from openruns.server.errors import ApiError

TEAM_A = Principal(team_id="a", run_id=None, bucket="key:1")


@pytest.mark.parametrize(
    ("caller", "requested", "team"),
    [
        (ANONYMOUS, None, "default"),  # auth off, nothing named
        (ANONYMOUS, "", "default"),  # an empty name counts as none (PRIME_TEAM_ID="")
        (ANONYMOUS, "b", "b"),  # auth off: the team named
        (TEAM_A, None, "a"),  # a key acts in its team
        (TEAM_A, "", "a"),
        (TEAM_A, "a", "a"),  # naming its own team is fine
    ],
)
def test_the_team_acted_in(caller, requested, team):
    assert acting_team(caller, requested) == team


def test_another_team_is_refused_naming_both():
    with pytest.raises(ApiError) as raised:
        acting_team(TEAM_A, "b")
    assert (raised.value.status_code, raised.value.code) == (403, "forbidden")
    assert raised.value.message == "this API key belongs to team 'a', not 'b'"


def test_each_wire_words_the_fix_in_its_own_terms():
    with pytest.raises(ApiError) as prime:
        acting_team(TEAM_A, "b", hint="set PRIME_TEAM_ID={team} (or pass team_id={team!r})")
    assert prime.value.message == (
        "this API key belongs to team 'a', not 'b': set PRIME_TEAM_ID=a (or pass team_id='a')"
    )
    with pytest.raises(ApiError) as wandb:
        acting_team(TEAM_A, "b", noun="entity", hint="set WANDB_ENTITY={team}")
    assert wandb.value.message == "this API key belongs to entity 'a', not 'b': set WANDB_ENTITY=a"
