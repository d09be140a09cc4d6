"""
`openruns alerts`: alert rules on a server and their delivery log (docs/server.md, Alerts).

    openruns alerts add "run failed" --on failed --webhook https://hooks.slack.com/services/...
    openruns alerts add "loss high" --on threshold --metric loss --above 5 --window-points 20 \\
        --project rl-math --webhook https://example.com/hook --format generic
    openruns alerts ls
    openruns alerts rm 3
    openruns alerts deliveries --status failed
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["add_arguments", "run"]

PROG = "openruns alerts"
CONDITIONS = ("failed", "silent", "nonfinite", "threshold", "error_rate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .cli import add_server_options

    add_server_options(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    ls = sub.add_parser("ls", help="list the team's rules", description="List alert rules.")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")

    add = sub.add_parser(
        "add",
        help="add a rule; prints its id and its webhook's signing secret",
        description="Add an alert rule: a condition, a webhook, a scope (the team, or "
        "--project). Prints the rule's id, and its webhook signing secret on stderr.",
    )
    add.add_argument("name", help="the rule's name (said in each alert)")
    add.add_argument("--on", choices=CONDITIONS, required=True, help="the condition")
    add.add_argument("--webhook", required=True, metavar="URL", help="http(s) URL to POST to")
    add.add_argument(
        "--format",
        choices=("chat", "generic"),
        default="chat",
        help="chat (default): {text, content} for Slack and Discord; generic: the event JSON",
    )
    add.add_argument("--project", help="only this project's runs (default: every run of the team)")
    add.add_argument("--team", help="the team (default: the key's team; 'default' without auth)")
    add.add_argument("--metric", help="threshold: the metric; nonfinite: the metric or * (default)")
    add.add_argument("--above", type=float, help="threshold or error_rate: fire above this")
    add.add_argument("--below", type=float, help="threshold: fire below this")
    add.add_argument(
        "--stat", choices=("mean", "min", "max", "last"), help="threshold: of the window"
    )
    add.add_argument("--window-points", type=int, help="threshold: the last K points (default 1)")
    add.add_argument("--window-minutes", type=float, help="threshold: the points of the last M min")
    add.add_argument("--minutes", type=float, help="silent: minutes without data")
    add.add_argument(
        "--statuses",
        help="failed: comma-separated, of failed,crashed (default both)",
    )
    add.add_argument("--window-episodes", type=int, help="error_rate: newest N episodes (100)")
    add.add_argument("--min-episodes", type=int, help="error_rate: at least this many (10)")
    add.add_argument("--disabled", action="store_true", help="add it switched off")
    add.add_argument("--json", action="store_true", help="print the rule as JSON")

    rm = sub.add_parser("rm", help="delete a rule", description="Delete an alert rule.")
    rm.add_argument("rule_id", type=int, metavar="ID")

    log = sub.add_parser(
        "deliveries",
        help="the delivery log, newest first",
        description="Webhook deliveries, newest first: status, attempts, the last answer.",
    )
    log.add_argument("--rule", type=int, metavar="ID", help="of one rule")
    log.add_argument("--run", metavar="ID", help="of one run")
    log.add_argument("--status", choices=("pending", "delivered", "failed"), help="default: any")
    log.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    log.add_argument("--json", action="store_true", help="one JSON object per line")
    for action in (ls, add, rm, log):
        add_server_options(action, nested=True)


def run(args: argparse.Namespace) -> int:
    from .errors import ConfigurationError, OpenrunsError

    try:
        return int(_ACTIONS[args.action](args))
    except (ConfigurationError, OpenrunsError) as exc:
        print(f"{PROG} {args.action}: {exc}", file=sys.stderr)
        return 2


def condition_of(args: argparse.Namespace) -> dict[str, Any]:
    """The rule's condition from the options; ConfigurationError names a missing or stray one."""
    from .errors import ConfigurationError

    kind = args.on
    condition: dict[str, Any] = {"type": kind}
    given = {
        name: getattr(args, name)
        for name in (
            "metric",
            "above",
            "below",
            "stat",
            "window_points",
            "window_minutes",
            "minutes",
            "statuses",
            "window_episodes",
            "min_episodes",
        )
        if getattr(args, name) is not None
    }
    allowed = {
        "failed": {"statuses"},
        "silent": {"minutes"},
        "nonfinite": {"metric"},
        "threshold": {"metric", "above", "below", "stat", "window_points", "window_minutes"},
        "error_rate": {"above", "window_episodes", "min_episodes"},
    }[kind]
    stray = sorted(set(given) - allowed)
    if stray:
        options = ", ".join("--" + s.replace("_", "-") for s in stray)
        raise ConfigurationError(f"--on {kind} does not take {options}")
    if kind == "failed" and "statuses" in given:
        condition["statuses"] = [s.strip() for s in given["statuses"].split(",") if s.strip()]
    elif kind == "silent":
        if "minutes" not in given:
            raise ConfigurationError("--on silent needs --minutes")
        condition["minutes"] = given["minutes"]
    elif kind == "nonfinite":
        condition["metric"] = given.get("metric", "*")
    elif kind == "threshold":
        if "metric" not in given or ("above" in given) == ("below" in given):
            raise ConfigurationError("--on threshold needs --metric and one of --above, --below")
        condition["op"] = "above" if "above" in given else "below"
        condition["value"] = given.get("above", given.get("below"))
        condition["metric"] = given["metric"]
        for name in ("stat", "window_points", "window_minutes"):
            if name in given:
                condition[name] = given[name]
    elif kind == "error_rate":
        if "above" not in given:
            raise ConfigurationError("--on error_rate needs --above (a fraction, e.g. 0.2)")
        condition.update(given)
    return condition


def _client(args: argparse.Namespace) -> Any:
    from .cli import server_settings
    from .wire import WireClient

    return WireClient.from_settings(server_settings(args))


def _call(client: Any, call: Any) -> Any:
    from .wire import retrying

    return retrying(lambda: call(client), deadline=time.monotonic() + client.retry_timeout)


def _add(args: argparse.Namespace) -> int:
    import orjson

    body: dict[str, Any] = {
        "name": args.name,
        "condition": condition_of(args),
        "webhook": {"url": args.webhook, "format": args.format},
        "enabled": not args.disabled,
    }
    for name in ("project", "team"):
        value = getattr(args, name)
        if value is not None:
            body["team_id" if name == "team" else name] = value
    client = _client(args)
    try:
        # Not retried: a POST that reached the server but lost its answer would add it twice.
        rule = client.create_alert_rule(body)
    finally:
        client.close()
    if args.json:
        print(orjson.dumps(rule).decode())
    else:
        print(rule["id"])
    print(
        f"{PROG}: added rule {rule['id']}; its webhook signing secret: {rule['webhook']['secret']}",
        file=sys.stderr,
    )
    return 0


def _rm(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        _call(client, lambda wire: wire.delete_alert_rule(args.rule_id))
    finally:
        client.close()
    print(f"{PROG}: deleted rule {args.rule_id}", file=sys.stderr)
    return 0


def _ls(args: argparse.Namespace) -> int:
    import orjson

    client = _client(args)
    try:
        rules = _call(client, lambda wire: wire.get("/alerts/rules"))["items"]
    finally:
        client.close()
    if args.json:
        for rule in rules:
            print(orjson.dumps(rule).decode())
        return 0
    rows = [("ID", "NAME", "SCOPE", "CONDITION", "WEBHOOK", "ON")]
    for r in rules:
        scope = f"{r['team_id']}/{r['project']}" if r["project"] else r["team_id"]
        on = "yes" if r["enabled"] else "no"
        hook = f"{r['webhook']['url']} ({r['webhook']['format']})"
        rows.append((str(r["id"]), r["name"], scope, describe(r["condition"]), hook, on))
    _table(rows)
    return 0


def _deliveries(args: argparse.Namespace) -> int:
    import orjson

    query = {"rule_id": args.rule, "run_id": args.run, "status": args.status}
    query["limit"] = max(1, min(args.limit, 1000))
    client = _client(args)
    try:
        items = _call(client, lambda wire: wire.get("/alerts/deliveries", query))["items"]
    finally:
        client.close()
    if args.json:
        for item in items:
            print(orjson.dumps(item).decode())
        return 0
    rows = [("ID", "WHEN", "RULE", "RUN", "ALERT", "STATUS", "TRIES", "LAST ANSWER")]
    for d in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["created_at"]))
        answer = d["last_error"] or (str(d["response_status"]) if d["response_status"] else "")
        event = d["event"]
        rows.append(
            (
                str(d["id"]),
                when,
                d["rule_name"] or str(d["rule_id"]),
                d["run_id"] or "",
                f"[{event.get('level')}] {event.get('title')}",
                d["status"],
                str(d["attempts"]),
                answer[:60],
            )
        )
    _table(rows)
    return 0


def describe(condition: dict[str, Any]) -> str:
    """A condition in a few words."""
    kind = condition["type"]
    if kind == "failed":
        return " or ".join(condition.get("statuses", ["failed", "crashed"]))
    if kind == "silent":
        return f"silent {condition['minutes']:g} min"
    if kind == "nonfinite":
        return f"{condition.get('metric', '*')} NaN/inf"
    if kind == "threshold":
        if condition.get("window_minutes") is not None:
            window = f"{condition['window_minutes']:g} min"
        else:
            window = f"{condition.get('window_points') or 1} pts"
        stat = condition.get("stat", "mean")
        return f"{stat}({condition['metric']}, {window}) {condition['op']} {condition['value']:g}"
    return f"error rate > {condition['above']:g} of {condition.get('window_episodes', 100)}"


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


_ACTIONS = {"ls": _ls, "add": _add, "rm": _rm, "deliveries": _deliveries}
