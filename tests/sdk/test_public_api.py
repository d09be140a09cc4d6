from __future__ import annotations

import openruns


def test_all_lists_exactly_the_public_names():
    public = {n for n in dir(openruns) if not n.startswith("_")} | {"__version__"}
    public.discard("annotations")  # `from __future__ import annotations` binds it
    # Submodules imported by the package are attributes too; only `metrics` is public.
    modules = {n for n in public if type(getattr(openruns, n)).__name__ == "module"}
    assert sorted(openruns.__all__) == openruns.__all__
    assert set(openruns.__all__) == (public - modules) | {"metrics"}


def test_exception_hierarchy():
    assert issubclass(openruns.ConfigurationError, openruns.OpenrunsError)
    assert issubclass(openruns.RunFinishedError, openruns.OpenrunsError)
    assert issubclass(openruns.APITimeoutError, openruns.TransportError)
    assert issubclass(openruns.TransportError, openruns.APIError)
    assert issubclass(openruns.RetryableAPIError, openruns.APIError)
