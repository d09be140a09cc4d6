"""
`openruns server usage`: what the stores hold, per team, project and run (store/usage.py),
read from the database directly like `openruns server check`.

    openruns server usage [--data-dir D | --db URL] [--team T] [--project P] [--runs N] [--json]

Tables on stdout (teams, projects, the N largest runs), or with --json one JSON document (one
line: {"total", "teams", "projects", "runs"}) with every run. Exit status 0, or 2 when the
stores cannot be opened.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import orjson

from .store import usage

__all__ = ["human_bytes", "run"]


def run(args: Any, settings: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    from .config import ServerConfigError
    from .state import open_stores

    try:
        store, _ = open_stores(settings)
    except ServerConfigError as exc:
        print(f"openruns server usage: {exc}", file=err)
        return 2
    try:
        found = store.db.read_sync(usage.usage, args.team, args.project, None)
    finally:
        store.close()
    if args.json:
        print(orjson.dumps(found).decode(), file=out)  # one line, like every --json
        return 0
    _table(out, "TEAM", [(t["team_id"], t) for t in found["teams"]])
    print(file=out)
    _table(out, "PROJECT", [(f"{p['team_id']}/{p['project']}", p) for p in found["projects"]])
    print(file=out)
    largest = found["runs"][: max(0, args.runs)]
    _table(out, "RUN", [(f"{r['team_id']}/{r['project']}/{r['id']}", r) for r in largest])
    total = found["total"]
    print(
        f"openruns server usage: {total['runs']} runs, {human_bytes(total['blob_bytes'])} of "
        f"blobs, ~{human_bytes(total['row_bytes'])} of rows (estimated)",
        file=err,
    )
    return 0


def _table(out: TextIO, title: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    lines = [(title, "RUNS", "BLOBS", "BLOB BYTES", "ROW BYTES", "METRIC ROWS", "EPISODES")]
    for name, row in rows:
        lines.append(
            (
                name,
                str(row.get("runs", 1)),
                str(row["blobs"]),
                human_bytes(row["blob_bytes"]),
                "~" + human_bytes(row["row_bytes"]),
                str(row["metric_rows"] + row["metric_time_rows"]),
                str(row["episodes"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip(),
            file=out,
        )


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
