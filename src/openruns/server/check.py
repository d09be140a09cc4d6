"""
`openruns server check`: compare the blob store with the database that references it.

    openruns server check [--data-dir D | --db URL --blobs s3://...] [--verify]
                          [--remove-unreferenced] [--min-age-hours H]

- damaged: a blob the database references (an episode segment, a Prime wire object) that is
  missing, or whose size is not the one recorded; with --verify, also a segment whose zstd
  frames do not all decompress and match their checksums, or whose bytes do not match the
  digests its index rows keep (migration 0012): a flipped byte, or another segment in its
  place. The readers apply the same rule (segment_reads.py), so what --verify finds is what
  reads answer 410 for and exports count. This reads every segment.
- unreferenced: a blob no row references, older than --min-age-hours (24). A crash between a
  segment's write and the commit of its rows leaves one, and so does a presigned Parquet PUT
  that was never confirmed; they cost only space. Younger blobs may belong to an upload in
  progress (its blob is written before its rows), so they are never reported or removed.
  --remove-unreferenced deletes them.

One line per finding on stdout (`damaged<TAB>key<TAB>reason`, `unreferenced<TAB>key<TAB>bytes`,
`removed<TAB>key`), a summary on stderr; with --json, one JSON document on stdout instead
(`check_document`) and nothing on stderr. Exit status 0 when nothing is damaged and nothing
unreferenced is left, 1 otherwise, 2 when the stores cannot be opened. It reads the database
and lists the bucket while the server runs; removal is safe alongside a running server for the
reason above.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import zstandard
from sqlalchemy import Connection, select

from .segment_reads import iter_frames
from .segments import frames_digest
from .store import episodes
from .store.blobs import BlobStore
from .store.schema import prime_objects, segments, wandb_files

__all__ = ["CheckResult", "check_blobs", "check_document"]

HOUR = 3600.0


@dataclass
class CheckResult:
    damaged: list[tuple[str, str]] = field(default_factory=list)
    unreferenced: list[tuple[str, int]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    young: int = 0  # unreferenced but too recent to judge
    blobs: int = 0
    referenced: int = 0

    @property
    def clean(self) -> bool:
        return not self.damaged and len(self.removed) == len(self.unreferenced)


def referenced_blobs(conn: Connection) -> dict[str, tuple[int, bool]]:
    """{blob key: (recorded size, is an episode segment)} of every blob the database names."""
    found: dict[str, tuple[int, bool]] = {}
    for key, size in conn.execute(select(segments.c.blob_key, segments.c.bytes)):
        found[key] = (int(size), True)
    for key, size in conn.execute(select(prime_objects.c.blob_key, prime_objects.c.bytes)):
        found.setdefault(key, (int(size), False))
    # The W&B wire's run files (config.yaml, media, tables): issue 19.
    for key, size in conn.execute(select(wandb_files.c.blob_key, wandb_files.c.bytes)):
        found.setdefault(key, (int(size), False))
    return found


def check_blobs(
    referenced: dict[str, tuple[int, bool]],
    blobs: BlobStore,
    *,
    verify: bool = False,
    digests: Mapping[str, set[tuple[int, int, bytes]]] | None = None,
    remove_unreferenced: bool = False,
    min_age: float = 24 * HOUR,
    now: float | None = None,
    report: Callable[[str], None] = lambda line: None,
) -> CheckResult:
    """Compare `referenced` (referenced_blobs) with what `blobs` holds; see the module.
    `digests` (episodes.frame_digests): what --verify checks each segment's frames against."""
    now = time.time() if now is None else now
    result = CheckResult(referenced=len(referenced))
    seen: set[str] = set()
    for info in blobs.list_blobs():
        result.blobs += 1
        recorded = referenced.get(info.key)
        if recorded is None:
            if now - info.modified < min_age:
                result.young += 1
                continue
            result.unreferenced.append((info.key, info.size))
            report(f"unreferenced\t{info.key}\t{info.size}")
            if remove_unreferenced:
                blobs.delete(info.key)
                result.removed.append(info.key)
                report(f"removed\t{info.key}")
            continue
        seen.add(info.key)
        size, is_segment = recorded
        reason = None
        if info.size != size:
            reason = f"{info.size} bytes where {size} were written"
        elif verify and is_segment:
            reason = _frames_problem(blobs, info.key, (digests or {}).get(info.key, set()))
        if reason is not None:
            result.damaged.append((info.key, reason))
            report(f"damaged\t{info.key}\t{reason}")
    for key in sorted(set(referenced) - seen):
        result.damaged.append((key, "missing"))
        report(f"damaged\t{key}\tmissing")
    return result


def check_document(result: CheckResult, *, verified: bool, min_age_hours: float) -> dict[str, Any]:
    """`openruns server check --json`: the findings with stable field names (docs/agents.md)."""
    return {
        "clean": result.clean,
        "blobs": result.blobs,
        "referenced": result.referenced,
        "damaged": [{"key": key, "reason": reason} for key, reason in result.damaged],
        "unreferenced": [{"key": key, "bytes": size} for key, size in result.unreferenced],
        "removed": list(result.removed),
        "young": result.young,
        "verified": verified,
        "min_age_hours": min_age_hours,
    }


def _frames_problem(blobs: BlobStore, key: str, indexed: set[tuple[int, int, bytes]]) -> str | None:
    try:
        blob = blobs.get(key)
        for _ in iter_frames(blob):
            pass
    except FileNotFoundError:
        return "missing"
    except zstandard.ZstdError as exc:
        return f"its frames do not decompress: {exc}"
    view = memoryview(blob)
    wrong = sum(frames_digest(view[o : o + n]) != d for o, n, d in indexed)
    if wrong:
        return (
            f"{wrong} of its {len(indexed)} indexed groups of frames are not the bytes stored "
            "(they do not match the index's digests)"
        )
    return None


def run(args: Any, settings: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The command (server/cli.py parses its arguments and resolves the settings)."""
    out = out or sys.stdout
    err = err or sys.stderr
    from .config import ServerConfigError
    from .state import open_stores

    try:
        store, blobs = open_stores(settings)
    except ServerConfigError as exc:
        print(f"openruns server check: {exc}", file=err)
        return 2
    as_json = getattr(args, "json", False)
    try:
        referenced = store.db.read_sync(referenced_blobs)
        digests = store.db.read_sync(episodes.frame_digests) if args.verify else None
        result = check_blobs(
            referenced,
            blobs,
            verify=args.verify,
            digests=digests,
            remove_unreferenced=args.remove_unreferenced,
            min_age=args.min_age_hours * HOUR,
            report=(lambda line: None)
            if as_json
            else lambda line: print(line, file=out, flush=True),
        )
    finally:
        store.close()
    if as_json:
        from ..cli import print_json

        document = check_document(result, verified=args.verify, min_age_hours=args.min_age_hours)
        print_json(document, out)
        return 0 if result.clean else 1
    left = len(result.unreferenced) - len(result.removed)
    print(
        f"openruns server check: {result.blobs} blobs in {blobs.describe()}, "
        f"{result.referenced} referenced; {len(result.damaged)} damaged, "
        f"{len(result.unreferenced)} unreferenced ({len(result.removed)} removed), "
        f"{result.young} too recent to judge (younger than {args.min_age_hours:g} h)"
        + ("" if args.verify else "; sizes only, --verify reads every segment")
        + (f"; remove the unreferenced with --remove-unreferenced ({left} left)" if left else ""),
        file=err,
    )
    return 0 if result.clean else 1
