"""The public face without a run: its names, the exception tree, prime-runs' names and values.
Runs opened with prime-runs' arguments are in tests/sdk/test_public_api.py."""

from __future__ import annotations

import dataclasses

import prime_runs
import pytest

import openruns


def test_all_lists_exactly_the_public_names():
    public = {n for n in dir(openruns) if not n.startswith("_")} | {"__version__"}
    public.discard("annotations")  # `from __future__ import annotations` binds it
    # Submodules imported by the package are attributes too; `metrics` and `projection` are
    # the public ones.
    modules = {n for n in public if type(getattr(openruns, n)).__name__ == "module"}
    assert sorted(openruns.__all__) == openruns.__all__
    assert set(openruns.__all__) == (public - modules) | {"metrics", "projection"}


def test_exception_hierarchy():
    assert issubclass(openruns.ConfigurationError, openruns.OpenrunsError)
    assert issubclass(openruns.RunFinishedError, openruns.OpenrunsError)
    assert issubclass(openruns.APITimeoutError, openruns.TransportError)
    assert issubclass(openruns.TransportError, openruns.APIError)
    assert issubclass(openruns.RetryableAPIError, openruns.APIError)


# -- prime-runs 0.1.4 code runs with `import openruns as pr` ---------------------------------


def test_every_name_of_prime_runs_exists():
    assert prime_runs.__version__ == "0.1.4"
    missing = [name for name in prime_runs.__all__ if not hasattr(openruns, name)]
    assert missing == []
    assert set(prime_runs.__all__) <= set(openruns.__all__)


def test_the_constants_have_prime_runs_values():
    for name in ("CONFIG_SOURCE_KEY", "TRACES_OPT_OUT_ENV", "MODE_ENV"):
        assert getattr(openruns, name) == getattr(prime_runs, name), name
    assert [s.value for s in openruns.RunStatus] == [s.value for s in prime_runs.RunStatus]
    assert openruns.RunStatus("crashed").is_terminal()
    assert openruns.RunKind == prime_runs.RunKind


def test_the_exceptions_are_openruns_own_under_prime_runs_names():
    assert openruns.PrimeRunsError is openruns.OpenrunsError
    for name in ("ConfigurationError", "EnvironmentResolutionError", "RunFinishedError"):
        assert issubclass(getattr(openruns, name), openruns.PrimeRunsError), name
    for name, status in (
        ("UnauthorizedError", 401),
        ("PaymentRequiredError", 402),
        ("ForbiddenError", 403),
        ("NotFoundError", 404),
        ("RetryableAPIError", 429),
    ):
        error = openruns.errors.error_for_status(status, "x")
        assert type(error) is getattr(openruns, name) and isinstance(error, openruns.APIError)
    assert issubclass(openruns.TransportError, openruns.APIError)
    assert openruns.errors.ValidationRejectedError is openruns.BadRequestError
    assert openruns.errors.LineFormatConflictError is openruns.ConflictError


@pytest.mark.parametrize(
    "value", ["gsm8k", "alice/math", {"name": "x", "version_id": "v-7"}, {"id": "env-1"}]
)
def test_environment_ref_coerces_as_prime_runs(value):
    ours = openruns.EnvironmentRef.coerce(value)
    theirs = prime_runs.EnvironmentRef.coerce(value)
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)


@pytest.mark.parametrize("bad", [{}, {"slug": "no-owner"}])
def test_environment_ref_refuses_what_prime_runs_refuses(bad):
    with pytest.raises(ValueError):
        prime_runs.EnvironmentRef.coerce(bad)
    with pytest.raises(ValueError):
        openruns.EnvironmentRef.coerce(bad)


def test_training_spec_has_prime_runs_fields():
    ours = [f.name for f in dataclasses.fields(openruns.TrainingSpec)]
    assert ours == [f.name for f in dataclasses.fields(prime_runs.TrainingSpec)]
    with pytest.raises(ValueError):
        openruns.TrainingSpec(max_steps=-1)


def test_a_config_source_under_config_source_key_is_the_config_file():
    source = {"format": "toml", "text": "lr = 1e-6\n", "filename": "rl.toml"}
    coerced = openruns.ConfigSource.coerce({openruns.CONFIG_SOURCE_KEY: source})
    assert coerced == openruns.ConfigSource(text="lr = 1e-6\n", format="toml", filename="rl.toml")
    # Any other mapping is kept as JSON, as before.
    assert openruns.ConfigSource.coerce({"lr": 1}).format == "json"
