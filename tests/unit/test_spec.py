"""Run statuses, config sources and init()'s refusals of bad arguments (before anything is
created). Runs stored with their config and training spec are in tests/sdk/test_spec.py."""

from __future__ import annotations

import pytest

import openruns
from openruns import ConfigSource
from openruns.errors import ConfigurationError


def test_config_limits(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"x" * (256 * 1024 + 1))
    with pytest.raises(ConfigurationError, match="at most 262144 bytes"):
        ConfigSource.from_file(big)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigurationError, match="not UTF-8"):
        ConfigSource.from_file(binary)
    with pytest.raises(ConfigurationError, match="cannot read"):
        ConfigSource.from_file(tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match="config must be a path"):
        ConfigSource.coerce(42)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "pretrain"}, "kind must be 'eval' or 'train'"),
        ({"tags": "one"}, "tags must be a list of strings"),
        ({"environments": [3]}, "environments"),
        ({"id": "a/b"}, "id: run id .a/b. is not valid"),
        ({"mode": "online"}, "online mode needs a server"),
    ],
)
def test_init_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        openruns.init(dir=tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())  # nothing was created


def test_run_status():
    assert openruns.RunStatus("failed") is openruns.RunStatus.FAILED
    assert [s.is_terminal() for s in openruns.RunStatus] == [False, True, True, True, True]


def test_cut_text_keeps_within_the_limit_with_a_marker():
    from openruns.spec import MAX_ERROR_CHARS, MAX_LOG_LINE_CHARS, cut_text

    assert cut_text("short", 100) == "short"
    for size in (MAX_LOG_LINE_CHARS, MAX_LOG_LINE_CHARS + 1, 100_000, 1_000_003):
        text = "a" + "x" * (size - 2) + "z"
        for limit in (MAX_LOG_LINE_CHARS, MAX_ERROR_CHARS):
            start, end = cut_text(text, limit), cut_text(text, limit, keep="end")
            assert len(start) <= limit and len(end) <= limit, (size, limit)
            if size > limit:
                assert start.startswith("a") and start.endswith("characters cut]")
                assert end.startswith("[openruns: ") and end.endswith("z")
                cut = int(end.split()[1])
                assert len(end) - len(end.split("\n", 1)[0]) - 1 == size - cut
