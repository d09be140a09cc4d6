"""The run-id rule and new ids, without a run: what init() refuses at once (nothing created),
and the server's check, which is the SDK's rule. Ranks, attaching and exported runs are in
tests/sdk/test_identity.py."""

from __future__ import annotations

import os

import pytest

import openruns
from openruns.identity import new_run_id


def test_run_ids_are_unique_and_sort_by_creation():
    ids = [new_run_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) == 24 and i.isalnum() and i.islower() for i in ids)


@pytest.mark.parametrize(
    "bad", [".", "..", "a/b", "../etc", "-rf", ".hidden", "a b", "x" * 65, "run\n", "", "é"]
)
def test_an_id_outside_the_safe_alphabet_is_refused_at_once(tmp_path, bad):
    with pytest.raises(ValueError, match=r"^id: run id .* is not valid: use 1 to 64 letters"):
        openruns.init(id=bad, mode="offline", dir=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing was created


def test_an_id_from_run_id_or_the_environment_is_named_in_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RUN_ID", "team/run 7")
    with pytest.raises(openruns.ConfigurationError, match=r"^id \(the value of RUN_ID\): run id"):
        openruns.init(id=os.environ["RUN_ID"], mode="offline", dir=tmp_path)
    monkeypatch.setenv("OPENRUNS_RUN_ID", "../escape")
    monkeypatch.setenv("OPENRUNS_RUN_PID", "1")  # exported by another process: attach to it
    with pytest.raises(ValueError, match=r"^OPENRUNS_RUN_ID: run id '../escape' is not valid"):
        openruns.init(mode="offline", dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_server_checks_the_sdks_rule():
    pytest.importorskip("fastapi", reason="the server extra holds the server's check")
    from openruns import identity
    from openruns.server.errors import ApiError
    from openruns.server.store.runs import check_run_id

    for candidate in ("ok-1", "a/b", "..", "x" * 65, "job.2", "-x"):
        sdk_refuses = identity.invalid_run_id(candidate) is not None
        try:
            check_run_id(candidate)
            server_refuses = False
        except ApiError:
            server_refuses = True
        assert server_refuses == sdk_refuses, candidate
    # One message too: the server answers the SDK's words.
    with pytest.raises(ApiError) as raised:
        check_run_id("a/b")
    assert raised.value.message == identity.invalid_run_id("a/b")
