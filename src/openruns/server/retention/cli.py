"""
`openruns server retention`: one retention pass by hand, against the configured stores (safe
while servers run: a run another pass holds is left to it).

    openruns server retention [--data-dir D | --db URL --blobs B] [--retention-days N]
                              [--retention-keep-per-step K] [--config FILE] [--dry-run] [--json]

Prints a line per run reduced (with --dry-run: per run that would be, nothing changed, bytes
estimated from the dropped records' share of each segment), or with --json one document
{"dry_run", "runs": [...], "episodes_dropped", "bytes_dropped"}. Exit status 0; 2 with a
one-line message when no policy is configured or the stores cannot be opened.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TextIO

__all__ = ["run"]


def run(args: Any, settings: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    from ...cli import print_json
    from ..config import ServerConfigError
    from ..state import open_stores
    from ..usage_cli import human_bytes
    from .reduce import run_pass

    rules = settings.retention_rules()
    if not rules:
        print(
            "openruns server retention: no retention policy is configured: pass "
            "--retention-days N, or add [[retention]] entries to the server's config file",
            file=err,
        )
        return 2
    try:
        store, blobs = open_stores(settings)
    except ServerConfigError as exc:
        print(f"openruns server retention: {exc}", file=err)
        return 2
    try:
        reports = asyncio.run(run_pass(store, blobs, rules, dry_run=args.dry_run))
    finally:
        store.close()
    episodes = sum(r["episodes_dropped"] for r in reports)
    size = sum(r["bytes_dropped"] for r in reports)
    if args.json:
        document = {
            "dry_run": bool(args.dry_run),
            "runs": reports,
            "episodes_dropped": episodes,
            "bytes_dropped": size,
        }
        print_json(document, out)
        return 0
    verb = "would drop" if args.dry_run else "dropped"
    for r in reports:
        approx = "~" if r["estimate"] else ""
        print(
            f"{r['team_id']}/{r['project']}/{r['id']}: {verb} {r['episodes_dropped']} of "
            f"{r['episodes']} episodes, {approx}{human_bytes(r['bytes_dropped'])} (keeping "
            f"{r['rule']['keep_per_step']} per step)",
            file=out,
        )
    print(
        f"openruns server retention: {len(reports)} run(s); {verb} {episodes} episodes, "
        f"{'~' if args.dry_run else ''}{human_bytes(size)}",
        file=err,
    )
    return 0
