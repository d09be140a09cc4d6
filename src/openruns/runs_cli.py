"""
`openruns runs`: runs on a server, for schedulers and people at a terminal.

    RUN_ID=$(openruns runs create --name rl-qwen3 --model Qwen/Qwen3-8B --config rl.toml)
    export OPENRUNS_RUN_ID=$RUN_ID      # every component started with it attaches and flushes
    ...
    openruns runs finish "$RUN_ID" --status failed --error "RuntimeError: OOM on node 3"
    openruns runs ls --status running
    openruns runs show "$RUN_ID"
    openruns runs rm "$RUN_ID" --yes   # the run and everything it owns, for good

A run created here has no owner process: nothing heartbeats for it, so the server never marks
it crashed, and whoever created it sets its final status with `finish` (a hosted launch: the
scheduler, from how its job ended). A failure finished without `--error` keeps the fatal error a
component reported to the run, if one did.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "run"]

PROG = "openruns runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .cli import add_json_option, add_server_options

    add_server_options(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = sub.add_parser(
        "create",
        help="create a run and print its id (for RUN_ID / OPENRUNS_RUN_ID)",
        description="Create a run owned by the caller (a scheduler): print its id, or with "
        "--format env the variables a component needs to attach to it.",
    )
    create.add_argument("--name", help="run name (default: none, a component may set it)")
    create.add_argument("--kind", choices=("train", "eval"), default="train", help="default train")
    create.add_argument("--model", help="model the run trains or evaluates (default: none)")
    create.add_argument(
        "--config", metavar="FILE", help="config file stored with the run (default: none)"
    )
    create.add_argument("--description", help="free text (default: none)")
    create.add_argument(
        "--tag", action="append", default=[], help="a tag (repeat for several; default none)"
    )
    create.add_argument("--team", help="the team (default: the key's team; 'default' without auth)")
    create.add_argument("--id", help="the run id (default: a new one)")
    create.add_argument(
        "--format",
        choices=("id", "env", "json"),
        default="id",
        help="id (default): the run id; env: NAME=value lines for the components (the run id, "
        "the server and the run's own token); json: the run as the server returned it",
    )

    finish = sub.add_parser(
        "finish",
        help="set a run's final status",
        description="Set a running run's final status. A run already finished with the same "
        "status is left as it is; with another status this fails (exit 1).",
    )
    finish.add_argument("run_id", metavar="ID")
    finish.add_argument(
        "--status", choices=("completed", "failed", "cancelled"), required=True, help="required"
    )
    finish.add_argument(
        "--error",
        metavar="MSG",
        help="why it failed (default: the error a component reported, if any)",
    )

    ls = sub.add_parser("ls", help="list runs, newest first", description="List runs.")
    ls.add_argument("--kind", choices=("train", "eval"), help="default: any")
    ls.add_argument(
        "--status",
        choices=("running", "completed", "failed", "cancelled", "crashed"),
        help="default: any",
    )
    ls.add_argument("--name", help="name contains this (default: any)")
    ls.add_argument("--tag", help="has this tag (default: any)")
    ls.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    add_json_option(ls, '{"runs": [run, ...]}, each run as GET /api/v1/runs/{id} answers it')

    show = sub.add_parser("show", help="one run's metadata and status", description="Show a run.")
    show.add_argument("run_id", metavar="ID")
    add_json_option(show, "the run as GET /api/v1/runs/{id} answers it")

    rm = sub.add_parser(
        "rm",
        help="delete a run with everything it owns",
        description="Delete a run for good: its metrics, episodes, annotations, console "
        "output, files and blobs. Asks first unless --yes (without a terminal to ask on, "
        "--yes is required). The id stays taken: creating a run with it again is refused "
        "unless asked for explicitly (reuse_deleted_id).",
    )
    rm.add_argument("run_id", metavar="ID")
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--json", action="store_true", help="print the deletion's record as JSON")

    for action in (create, finish, ls, show, rm):
        add_server_options(action, nested=True)


def run(args: argparse.Namespace) -> int:
    from .errors import ConfigurationError, ConflictError, OpenrunsError

    try:
        return _ACTIONS[args.action](args)
    except ConflictError as exc:
        print(f"{PROG} {args.action}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (ConfigurationError, OpenrunsError) as exc:
        print(f"{PROG} {args.action}: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: Exception) -> str:
    """An error as one line of stderr, which scripts (and --json readers) take as the message."""
    return " ".join(str(exc).split())


def _client(args: argparse.Namespace) -> Any:
    from .cli import server_settings
    from .wire import WireClient

    settings = server_settings(args)
    return WireClient.from_settings(settings), settings


def _call(client: Any, call: Any) -> Any:
    """`call(client)`, retried for the retry_timeout setting when the server is busy or away."""
    from .wire import retrying

    return retrying(lambda: call(client), deadline=time.monotonic() + client.retry_timeout)


def _create(args: argparse.Namespace) -> int:
    from .errors import ConfigurationError
    from .identity import COMPAT_RUN_ID_ENV, RUN_ID_ENV, RUN_KIND_ENV, check_run_id, new_run_id
    from .spec import ConfigSource

    body: dict[str, Any] = {
        "id": new_run_id() if args.id is None else check_run_id(args.id, "--id"),
        "kind": args.kind,
        "name": args.name,
        "model": args.model,
        "description": args.description,
        "tags": list(args.tag),
        "team_id": args.team,
        "heartbeat": False,  # no owner process: the caller finishes the run
    }
    if args.config is not None:
        if not Path(args.config).is_file():
            raise ConfigurationError(f"config file {args.config!r} does not exist")
        source = ConfigSource.coerce(args.config)
        assert source is not None
        body["config"] = source.to_dict()
    client, settings = _client(args)
    try:
        fields = {k: v for k, v in body.items() if v is not None}
        created = _call(client, lambda wire: wire.create_run(fields, key=body["id"]))
    finally:
        client.close()
    if args.format == "json":
        import orjson

        print(orjson.dumps(created).decode())
    elif args.format == "env":
        variables = {
            RUN_ID_ENV: created["id"],
            COMPAT_RUN_ID_ENV: created["id"],
            RUN_KIND_ENV: created["kind"],
            "OPENRUNS_MODE": "online",
            "OPENRUNS_BASE_URL": settings.base_url,
            "OPENRUNS_API_KEY": created.get("token", ""),
        }
        print("\n".join(f"{k}={v}" for k, v in variables.items()))
    else:
        print(created["id"])
    url = _absolute(settings.base_url, created.get("url", ""))
    print(f"{PROG}: created run {created['id']} ({url})", file=sys.stderr)
    return 0


def _finish(args: argparse.Namespace) -> int:
    client, _ = _client(args)
    try:
        finish = {"status": args.status, "error": args.error}
        done = _call(client, lambda wire: wire.finish_run(args.run_id, finish))
    finally:
        client.close()
    error = f": {done['error']}" if done.get("error") else ""
    print(f"{PROG}: run {done['id']} is {done['status']}{error}", file=sys.stderr)
    return 0


def _ls(args: argparse.Namespace) -> int:
    from .cli import print_json

    params = {k: getattr(args, k) for k in ("kind", "status", "name", "tag")}
    params = {k: v for k, v in params.items() if v is not None}
    params["limit"] = max(1, min(args.limit, 500))
    client, _ = _client(args)
    try:
        page = _call(client, lambda wire: wire.get("/runs", params))
    finally:
        client.close()
    items = page["items"][: args.limit]
    if args.json:
        print_json({"runs": items})
        return 0
    rows = [("ID", "STATUS", "KIND", "NAME", "MODEL", "CREATED")]
    now = time.time()
    for r in items:
        created = _age(now - r["created_at"])
        rows.append((r["id"], r["status"], r["kind"], r["name"] or "", r["model"] or "", created))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _show(args: argparse.Namespace) -> int:
    import orjson

    client, settings = _client(args)
    try:
        doc = _call(client, lambda wire: wire.get_run(args.run_id))
    finally:
        client.close()
    if args.json:
        from .cli import print_json

        print_json(doc)
        return 0
    for key in ("id", "name", "kind", "status", "error", "model", "framework", "description"):
        if doc.get(key) is not None:
            print(f"{key}: {doc[key]}")
    if doc.get("status_history"):  # crashed by the sweeper, then completed by its owner, ...
        changes = ", then ".join(f"{c['status']} by {c['by']}" for c in doc["status_history"])
        print(f"status set: {changes}")
    summary = {k: v for k, v in (doc.get("summary") or {}).items() if k != "prime_runs"}
    summary = {k: v for k, v in summary.items() if not k.startswith("prime_runs/")}
    for key, value in (("tags", doc.get("tags")), ("environments", doc.get("environments"))):
        if value:
            print(f"{key}: {orjson.dumps(value).decode()}")
    if summary:  # without the prime-runs SDK's own bookkeeping (prime_runs/...), issue 24
        print(f"summary: {orjson.dumps(summary).decode()}")
    if doc.get("config"):
        print(f"config: {doc['config'].get('filename') or doc['config'].get('format')}")
    print(f"created: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(doc['created_at']))}")
    if doc.get("finished_at"):
        finished = time.localtime(doc["finished_at"])
        print(f"finished: {time.strftime('%Y-%m-%d %H:%M:%S', finished)}")
    print(f"url: {_absolute(settings.base_url, doc.get('url', ''))}")
    return 0


# A deletion answers once every row and blob is gone: minutes for a very large run.
_DELETE_TIMEOUT = 3600.0


def _rm(args: argparse.Namespace) -> int:
    import orjson

    client, _ = _client(args)
    try:
        doc = _call(client, lambda wire: wire.get_run(args.run_id))
        if not args.yes and not _confirm(doc):
            print(f"{PROG} rm: nothing deleted", file=sys.stderr)
            return 1
        # Not retried: a retry of a deletion that went through would answer 404.
        gone = client.delete_run(args.run_id, timeout=_DELETE_TIMEOUT)
    finally:
        client.close()
    if args.json:
        print(orjson.dumps(gone).decode())
    removed = gone.get("removed", {})
    figures = ", ".join(
        f"{removed[key]} {label}"
        for key, label in (
            ("episodes", "episodes"),
            ("metric_points", "metric rows"),
            ("metric_chunks", "metric chunks"),
            ("log_lines", "console lines"),
            ("blobs", "blobs"),
        )
        if removed.get(key)
    )
    size = removed.get("blob_bytes", 0)
    print(
        f"{PROG}: deleted run {gone['id']} ({figures or 'no data'}; {size} bytes of blobs)",
        file=sys.stderr,
    )
    return 0


def _confirm(doc: dict[str, Any]) -> bool:
    from .errors import ConfigurationError

    if not sys.stdin.isatty():
        raise ConfigurationError("no terminal to confirm on: pass --yes to delete the run")
    name = f" ({doc['name']})" if doc.get("name") else ""
    answer = input(f"Delete run {doc['id']}{name}, {doc['status']}, and all its data? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _absolute(base_url: str, url: str) -> str:
    return url if "://" in url else base_url + url


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


_ACTIONS = {"create": _create, "finish": _finish, "ls": _ls, "show": _show, "rm": _rm}
