from __future__ import annotations

import prime_runs
import pytest

import openruns

# -- prime-runs 0.1.4 code runs with `import openruns as pr` ---------------------------------


def test_init_takes_prime_runs_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv(openruns.TRACES_OPT_OUT_ENV, raising=False)
    run = openruns.init(
        mode="offline",
        dir=tmp_path,
        environments=[openruns.EnvironmentRef(slug="alice/math"), "gsm8k"],
        traces_opt_out=True,
    )
    run.finish()
    assert run.status is openruns.RunStatus.COMPLETED
    with pytest.raises(openruns.ConfigurationError, match="traces_opt_out"):
        openruns.init(mode="offline", dir=tmp_path, traces_opt_out="yes")


@pytest.mark.parametrize("value", ["1", "TRUE", "off", " no ", ""])
def test_prime_traces_opt_out_is_read_as_prime_runs_reads_it(tmp_path, monkeypatch, value):
    monkeypatch.setenv("PRIME_TRACES_OPT_OUT", value)
    openruns.init(mode="offline", dir=tmp_path).finish()


def test_a_bad_prime_traces_opt_out_fails_init_as_in_prime_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRACES_OPT_OUT", "maybe")
    # Both refuse it before any request or file, unless the run is disabled.
    with pytest.raises(prime_runs.ConfigurationError):
        prime_runs.init(mode="online", api_key="k", base_url="http://127.0.0.1:9")
    with pytest.raises(openruns.ConfigurationError, match="PRIME_TRACES_OPT_OUT"):
        openruns.init(mode="offline", dir=tmp_path)
    assert not any(tmp_path.iterdir())
    openruns.init(mode="disabled").finish()
