"""
openruns: open a run, stream what happens while it executes, close it with its real outcome.

    import openruns

    run = openruns.init(kind="train", model="Qwen/Qwen3-8B", config="rl.toml")
    with run:
        run.log_metrics({"loss": 0.5}, step=0)
        run.log_episodes(episodes)

Code written for prime-runs 0.1.4 runs as it is with `import openruns as pr`: every name of
its public API is here with the same meaning (docs/prime-runs.md lists what differs).
"""

from __future__ import annotations

from . import metrics, projection
from ._init import init
from ._version import __version__
from .errors import (
    APIError,
    APITimeoutError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    EnvironmentResolutionError,
    ForbiddenError,
    NotFoundError,
    OpenrunsError,
    PaymentRequiredError,
    PrimeRunsError,
    RetryableAPIError,
    RunFinishedError,
    TransportError,
    UnauthorizedError,
)
from .run import Run
from .settings import MODE_ENV, TRACES_OPT_OUT_ENV
from .spec import (
    CONFIG_SOURCE_KEY,
    ConfigSource,
    EnvironmentRef,
    RunKind,
    RunStatus,
    TrainingSpec,
)

__all__ = [
    "APIError",
    "APITimeoutError",
    "BadRequestError",
    "CONFIG_SOURCE_KEY",
    "ConfigSource",
    "ConfigurationError",
    "ConflictError",
    "EnvironmentRef",
    "EnvironmentResolutionError",
    "ForbiddenError",
    "MODE_ENV",
    "NotFoundError",
    "OpenrunsError",
    "PaymentRequiredError",
    "PrimeRunsError",
    "RetryableAPIError",
    "Run",
    "RunFinishedError",
    "RunKind",
    "RunStatus",
    "TRACES_OPT_OUT_ENV",
    "TrainingSpec",
    "TransportError",
    "UnauthorizedError",
    "__version__",
    "init",
    "metrics",
    "projection",
]
