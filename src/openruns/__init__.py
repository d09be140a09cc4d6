"""
openruns: open a run, stream what happens while it executes, close it with its real outcome.

    import openruns

    run = openruns.init(kind="train", model="Qwen/Qwen3-8B", config="rl.toml")
    with run:
        run.log_metrics({"loss": 0.5}, step=0)
        run.log_episodes(episodes)
"""

from __future__ import annotations

from . import metrics
from ._init import init
from .errors import (
    APIError,
    APITimeoutError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    OpenrunsError,
    RetryableAPIError,
    RunFinishedError,
    TransportError,
    UnauthorizedError,
)
from .run import Run
from .spec import ConfigSource, RunKind, RunStatus, TrainingSpec

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "APITimeoutError",
    "BadRequestError",
    "ConfigSource",
    "ConfigurationError",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "OpenrunsError",
    "RetryableAPIError",
    "Run",
    "RunFinishedError",
    "RunKind",
    "RunStatus",
    "TrainingSpec",
    "TransportError",
    "UnauthorizedError",
    "__version__",
    "init",
    "metrics",
]
