"""
An alert rule as the API takes and gives it: a condition, a webhook, a scope (the team's runs,
or one project's).

    {"name": "loss blew up", "project": "rl-math",
     "condition": {"type": "threshold", "metric": "loss", "op": "above", "value": 10,
                   "window_points": 5, "stat": "mean"},
     "webhook": {"url": "https://hooks.slack.com/services/...", "format": "chat"}}

Conditions (each holds for one run at a time; `subject` keeps metrics apart):
- failed: the run is failed or crashed (`statuses` narrows it).
- silent: the run is running and no metric points (system/ rows aside) or episodes arrived for
  `minutes`.
- nonfinite: the SDK dropped a NaN or infinite value of `metric` (a name, or "*": any).
- threshold: the `stat` (mean, min, max, last) of the metric's last `window_points` points, or
  of its points of the last `window_minutes`, is above / below `value`.
- error_rate: of the run's newest `window_episodes` episodes that say whether they succeeded
  (`ok`), more than `above` failed (with at least `min_episodes` of them).
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

import httpx
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "Condition",
    "RuleBody",
    "RulePatch",
    "Webhook",
    "new_secret",
    "public_rule",
]

MAX_WINDOW_POINTS = 1000


def _webhook_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except Exception as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"a webhook URL must be http or https, got {parsed.scheme or 'none'!r}")
    if not parsed.host:
        raise ValueError("a webhook URL needs a host")
    return url


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Failed(_Strict):
    type: Literal["failed"]
    statuses: list[Literal["failed", "crashed"]] = Field(
        default=["failed", "crashed"], min_length=1
    )


class Silent(_Strict):
    type: Literal["silent"]
    minutes: float = Field(gt=0, le=7 * 24 * 60)


class Nonfinite(_Strict):
    type: Literal["nonfinite"]
    metric: str = Field(default="*", min_length=1, max_length=256)


class Threshold(_Strict):
    type: Literal["threshold"]
    metric: str = Field(min_length=1, max_length=256)
    op: Literal["above", "below"]
    value: float
    stat: Literal["mean", "min", "max", "last"] = "mean"
    window_points: int | None = Field(default=None, ge=1, le=MAX_WINDOW_POINTS)
    window_minutes: float | None = Field(default=None, gt=0, le=7 * 24 * 60)

    @model_validator(mode="after")
    def _one_window(self) -> Threshold:
        if self.window_points is not None and self.window_minutes is not None:
            raise ValueError("give window_points or window_minutes, not both")
        if self.window_points is None and self.window_minutes is None:
            self.window_points = 1
        return self


class ErrorRate(_Strict):
    type: Literal["error_rate"]
    above: float = Field(ge=0, lt=1)
    window_episodes: int = Field(default=100, ge=1, le=10_000)
    min_episodes: int = Field(default=10, ge=1, le=10_000)


Condition = Annotated[
    Failed | Silent | Nonfinite | Threshold | ErrorRate, Field(discriminator="type")
]


class Webhook(_Strict):
    url: Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(_webhook_url)]
    # chat: {"text", "content"} (Slack and Discord incoming webhooks); generic: the event.
    format: Literal["chat", "generic"] = "chat"


class RuleBody(_Strict):
    name: str = Field(min_length=1, max_length=200)
    team_id: str | None = Field(default=None, max_length=128)
    project: str | None = Field(default=None, min_length=1, max_length=256)
    condition: Condition
    webhook: Webhook
    enabled: bool = True


class RulePatch(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    condition: Condition | None = None
    webhook: Webhook | None = None
    enabled: bool | None = None


def new_secret() -> str:
    """A rule's signing secret (shown with the rule to its team)."""
    return "whsec_" + secrets.token_hex(24)


def public_rule(rule: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": rule["id"],
        "team_id": rule["team_id"],
        "project": rule["project"],
        "name": rule["name"],
        "condition": rule["condition"],
        "webhook": {"url": rule["url"], "format": rule["format"], "secret": rule["secret"]},
        "enabled": rule["enabled"],
        "created_at": rule["created_at"],
    }
