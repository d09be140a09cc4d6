"""
`openruns keys`: manage API keys in a server's database (works while it runs).

    openruns keys create --team research     # prints the key, once
    openruns keys list [--json]             # or `keys ls`
    openruns keys revoke 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..cli import add_json_option

    parser.description = (
        "Manage the API keys in a server's database (its data directory's SQLite file, or "
        "--db / $OPENRUNS_DATABASE_URL / the server's config file). Keys belong to a team and "
        "see only that team's runs; only a hash is stored, so a key is shown once, when created."
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="create a key for a team and print it")
    create.add_argument("--team", required=True, help="the team the key acts for")
    listing = sub.add_parser(
        "list", aliases=["ls"], help="list keys (ids, teams, prefixes; never the keys)"
    )
    listing.add_argument("--team", default=None, help="only this team's keys (default: all)")
    add_json_option(
        listing, '{"keys": [{"id", "team_id", "prefix", "created_at", "revoked_at", "active"}]}'
    )
    revoke = sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id", type=int, help="the id shown by `openruns keys list`")
    for command in (create, listing, revoke):
        command.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help="the server's data directory (default $OPENRUNS_DATA_DIR, else "
            "$XDG_DATA_HOME/openruns, i.e. ~/.local/share/openruns)",
        )
        command.add_argument(
            "--database-url",
            "--db",
            default=None,
            metavar="URL",
            help="the server's database, as for `openruns server --db` (default "
            "$OPENRUNS_DATABASE_URL, else SQLite in the data directory)",
        )


def run(args: argparse.Namespace) -> int:
    from .config import ServerConfigError, ServerSettings
    from .store import Store
    from .store import keys as key_sql
    from .store.db import describe_url

    try:
        settings = ServerSettings.resolve(
            {"data_dir": args.data_dir, "database_url": args.database_url}
        )
        url = settings.sqlalchemy_url()
    except ServerConfigError as exc:
        print(f"openruns keys: {exc}", file=sys.stderr)
        return 1
    try:
        if settings.database_url is None:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = Store.open(url)
    except Exception as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"openruns keys: cannot open {describe_url(url)}: {reason}", file=sys.stderr)
        return 1
    try:
        if args.action == "create":
            key_id, key = store.db.write_sync(key_sql.create_key, args.team)
            print(key)
            print(
                f"key {key_id} of team {args.team!r}: store it now, it is not shown again",
                file=sys.stderr,
            )
        elif args.action in ("list", "ls") and args.json:
            from ..cli import print_json

            rows = store.db.read_sync(key_sql.list_keys, args.team)
            print_json({"keys": [{**row, "active": row["revoked_at"] is None} for row in rows]})
        elif args.action in ("list", "ls"):
            for row in store.db.read_sync(key_sql.list_keys, args.team):
                created = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created_at"]))
                state = "revoked" if row["revoked_at"] else "active"
                print(f"{row['id']}\t{row['team_id']}\t{row['prefix']}...\t{created}\t{state}")
        elif not store.db.write_sync(key_sql.revoke_key, args.key_id):
            print(f"openruns keys: no active key {args.key_id}", file=sys.stderr)
            return 1
    finally:
        store.close()
    return 0
