"""
One retention pass (issue 22): every ended run older than its rule is reduced to the sample.

    reports = await run_pass(store, blobs, settings.retention_rules())            # the server
    reports = await run_pass(store, blobs, rules, dry_run=True)                   # what it would

For each ended run whose most specific rule (rules.rule_for) says it is old enough, and that no
pass has reduced under a rule keeping as many (store/retention.claim, so one replica reduces a
run and an interrupted pass is taken up once its claim is stale):

1. Plan: the run's index rows, read a slice at a time; `rules.sample` chooses the kept ones per
   (stream, kind, step). Segments holding none to drop are left as they are.
2. Per segment holding some to drop: its kept records are read back through their index rows
   (segment_reads: every one checked against its digest; a damaged segment is left whole and
   logged) and packed into a new blob (segments.pack_records), written before any row points
   at it. The kept rows move to it, then the rows left are dropped, each a transaction of at
   most SLICE_ROWS rows, then the old segment's row goes.
3. The old blobs are deleted once the run's segments are done (deletion.delete_blobs), after a
   grace that lets a read that found a row at its old place finish; then the run's record says
   what is kept, what was dropped and when.

Metrics, summary, config, logs and every other row of the run are never touched. `retain_forever`
is the server's periodic pass (app.py's lifespan, every --retention-interval).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..deletion import delete_blobs
from ..errors import ApiError
from ..retention_policy import EpisodeRow, RetentionRule, rule_for, sample
from ..segment_reads import DamagedSegment, Location, RecordReader
from ..segments import Segment, blob_key_for, pack_records
from ..store import Store
from ..store import retention as sql
from ..store.blobs import BlobStore

__all__ = ["FIRST_PASS_DELAY", "Plan", "reduce_run", "retain_forever", "run_pass"]

logger = logging.getLogger("openruns.server")

# The periodic pass's first run after the server starts (then every --retention-interval): a
# server restarted more often than the interval still runs it.
FIRST_PASS_DELAY = 60.0
# A reader that found a record at its old place has this long to read it before the old blob
# goes (a record read takes milliseconds; an old run is rarely read at all).
REPLACED_BLOB_GRACE = 2.0
_RUNS_PAGE = 1000


@dataclass
class SegmentPlan:
    """A segment holding episodes to drop: the seqs it keeps, and what it drops."""

    id: int
    stream: str
    blob_key: str
    bytes: int
    keep: list[int] = field(default_factory=list)
    drop: list[int] = field(default_factory=list)
    drop_length: int = 0  # decompressed bytes of the dropped records
    length: int = 0  # of all its indexed records

    def bytes_estimate(self) -> int:
        """The bytes dropping would free: all of them, or the dropped records' share."""
        if not self.keep:
            return self.bytes
        return round(self.bytes * self.drop_length / max(1, self.length))


@dataclass
class Plan:
    """What reducing one run under `rule` keeps and drops."""

    run: dict[str, Any]
    rule: RetentionRule
    episodes: int
    kept: int
    segments: list[SegmentPlan]

    def report(self) -> dict[str, Any]:
        """The plan as `openruns server retention --dry-run` prints it."""
        return {
            **_run_fields(self.run, self.rule),
            "episodes": self.episodes,
            "episodes_kept": self.kept,
            "episodes_dropped": self.episodes - self.kept,
            "segments_rewritten": sum(1 for s in self.segments if s.keep),
            "segments_deleted": sum(1 for s in self.segments if not s.keep),
            "bytes_dropped": sum(s.bytes_estimate() for s in self.segments),
            "estimate": True,
        }


def _run_fields(run: dict[str, Any], rule: RetentionRule) -> dict[str, Any]:
    return {
        "id": run["id"],
        "team_id": run["team_id"],
        "project": run["project"],
        "finished_at": run["finished_at"],
        "rule": rule.describe(),
    }


async def run_pass(
    store: Store,
    blobs: BlobStore,
    rules: Sequence[RetentionRule],
    *,
    as_of: float | None = None,
    dry_run: bool = False,
    slice_rows: int = sql.SLICE_ROWS,
) -> list[dict[str, Any]]:
    """Reduce every run due under `rules` (judged old as of `as_of`, default now); a report
    per run reduced (with `dry_run`: per run that would be, nothing changed)."""
    if not rules:
        return []
    as_of = time.time() if as_of is None else as_of
    ended_before = as_of - min(rule.after_seconds for rule in rules)
    reports: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await store.read(sql.due_runs, ended_before, after, _RUNS_PAGE)
        if not page:
            return reports
        after = page[-1]["seq"]
        for run in page:
            rule = rule_for(rules, run["team_id"], run["project"])
            if rule is None or run["finished_at"] >= as_of - rule.after_seconds:
                continue
            if run["reduced_at"] is not None and run["keep_per_step"] == rule.keep_per_step:
                continue
            try:
                report = await reduce_run(store, blobs, run, rule, dry_run, slice_rows)
            except ApiError as exc:  # deleted meanwhile, or the database busy: next pass
                logger.warning("openruns: retention of run %s skipped: %s", run["id"], exc.message)
                continue
            if report is not None:
                reports.append(report)


async def reduce_run(
    store: Store,
    blobs: BlobStore,
    run: dict[str, Any],
    rule: RetentionRule,
    dry_run: bool = False,
    slice_rows: int = sql.SLICE_ROWS,
) -> dict[str, Any] | None:
    """Reduce `run` (a row of store/retention.due_runs) under `rule`; its report, or None
    when another pass holds it or it is reduced already."""
    if not dry_run and not await store.write(sql.claim, run["seq"], rule.describe(), time.time()):
        return None
    plan = await _plan(store, run, rule, slice_rows)
    if dry_run:
        return plan.report()
    replaced: list[str] = []
    last = 0.0
    for segment in plan.segments:
        if await _reduce_segment(store, blobs, run, segment, slice_rows):
            replaced.append(segment.blob_key)
            last = time.monotonic()
    if replaced:
        await asyncio.sleep(max(0.0, REPLACED_BLOB_GRACE - (time.monotonic() - last)))
        await asyncio.to_thread(delete_blobs, blobs, replaced)
    record = await store.write(sql.finish, run["seq"], time.time())
    return {**_run_fields(run, rule), "episodes": plan.episodes, **record, "estimate": False}


async def _plan(store: Store, run: dict[str, Any], rule: RetentionRule, slice_rows: int) -> Plan:
    """Read the run's index a slice at a time and choose what it keeps."""
    rows: list[EpisodeRow] = []
    placed: dict[int, tuple[int, int]] = {}  # seq -> (segment id, record length)
    after = 0
    while True:
        page = await store.read(sql.index_page, run["seq"], after, slice_rows)
        for seq, stream, kind, step, episode_id, reward, segment_id, length in page:
            rows.append(EpisodeRow(seq, stream, kind, step, episode_id, reward))
            placed[seq] = (segment_id, length)
        if len(page) < slice_rows:
            break
        after = page[-1][0]
    kept = sample(rows, rule.keep_per_step)
    stored = await store.read(sql.segments_of, run["seq"])
    plans: dict[int, SegmentPlan] = {}
    for row in rows:
        segment_id, length = placed[row.seq]
        info = stored.get(segment_id)
        if info is None:  # a segment written since the index was read: left as it is
            continue
        plan = plans.get(segment_id)
        if plan is None:
            plan = plans[segment_id] = SegmentPlan(
                segment_id, info["stream"], info["blob_key"], int(info["bytes"])
            )
        plan.length += length
        if row.seq in kept:
            plan.keep.append(row.seq)
        else:
            plan.drop.append(row.seq)
            plan.drop_length += length
    dropping = [plans[i] for i in sorted(plans) if plans[i].drop]
    return Plan(run, rule, len(rows), len(kept), dropping)


async def _reduce_segment(
    store: Store, blobs: BlobStore, run: dict[str, Any], segment: SegmentPlan, slice_rows: int
) -> bool:
    """Rewrite `segment` with its kept records, or drop it whole; whether its row went (its
    old blob is then the caller's to delete)."""
    run_seq = run["seq"]
    new_bytes: int | None = None
    if segment.keep:
        places = await store.read(sql.segment_rows, segment.id, segment.keep)
        try:
            packed = await asyncio.to_thread(_repack, blobs, places)
        except DamagedSegment as exc:
            logger.warning(
                "openruns: retention left segment %s of run %s whole: %s",
                segment.blob_key,
                run["id"],
                exc.message,
            )
            return False
        new_key = blob_key_for(run_seq, segment.stream)
        await asyncio.to_thread(blobs.put_atomic, new_key, packed.blob)
        new_bytes = len(packed.blob)
        moves = [
            {"seq": place["seq"], **row} for place, row in zip(places, packed.rows, strict=True)
        ]
        made = {
            "stream": segment.stream,
            "blob_key": new_key,
            "bytes": new_bytes,
            "records": len(moves),
        }
        new_id: int | None = None
        try:
            for i in range(0, len(moves), slice_rows):
                new_id = await store.write(
                    sql.move_rows,
                    run_seq,
                    segment.id,
                    new_id,
                    made if new_id is None else None,
                    moves[i : i + slice_rows],
                    time.time(),
                )
        except BaseException:
            if new_id is None:  # no row names the new blob
                await asyncio.to_thread(delete_blobs, blobs, [new_key])
            raise
    for i in range(0, len(segment.drop), slice_rows):
        chunk = segment.drop[i : i + slice_rows]
        await store.write(sql.drop_rows, run_seq, segment.id, chunk, time.time())
    every = segment.keep + segment.drop
    return await store.write(sql.retire_segment, run_seq, segment.id, every, new_bytes, time.time())


def _repack(blobs: BlobStore, places: list[dict[str, Any]]) -> Segment:
    """The records at `places` (each checked against its digest) packed into a new segment,
    its rows in the same order."""
    reader = RecordReader(blobs)
    return pack_records([reader.record(Location.of(place)) for place in places])


async def retain_forever(
    store: Store, blobs: BlobStore, rules: Sequence[RetentionRule], interval: float
) -> None:
    """The server's periodic pass: FIRST_PASS_DELAY after the start (or `interval`, if
    shorter), then every `interval` seconds. Nothing without rules."""
    if not rules:
        return
    await asyncio.sleep(min(interval, FIRST_PASS_DELAY))
    while True:
        try:
            reports = await run_pass(store, blobs, rules)
            if reports:
                dropped = sum(r["episodes_dropped"] for r in reports)
                logger.info(
                    "openruns: retention reduced %d run(s); episodes dropped in all: %d",
                    len(reports),
                    dropped,
                )
        except ApiError as exc:  # the database is busy or unreachable: the next pass retries
            logger.warning("openruns: retention pass skipped: %s", exc.message)
        except Exception:
            logger.warning("openruns: the retention pass failed; retrying", exc_info=True)
        await asyncio.sleep(interval)
