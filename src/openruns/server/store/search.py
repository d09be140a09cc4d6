"""
The full-text index of rollouts: its SQL, for SQLite (FTS5) and PostgreSQL (tsvector + GIN).

One search row per episode index row, with the same seq (migration 0006). The indexer
(server/search_indexer.py) follows the episodes table by seq behind ingest and never writes
in an upload's transaction:

    cursor = indexed_seq(conn)                      # the last seq indexed
    rows = pending(conn, cursor, limit)             # index rows after it, with their places
    add_documents(conn, cursor, rows[-1]["seq"], docs)   # compare-and-set on the cursor

A query is `rollouts.Query` (words, phrases, prefixes: all must match), narrowed to one run
(or a bounded set of runs: the cross-run search of routes/search_runs.py) and filtered by
stream, kind, step range, environment, outcome and reward range; hits come newest first (by
seq) in keyset pages.

On SQLite the FTS5 table stores no text (`content=''`): the text is already in the
segments, and snippets are cut from the records of a page of hits. Its `scope` column holds
the tokens r<run seq>, s<stream> and k<kind>, so narrowing to a run is part of the full-text
match. On PostgreSQL the scope is in plain columns; a tsvector holds at most 1 MB, so the
text indexed there is cut at PG_TEXT_CHARS.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, func, select, text

from .schema import RECORD_LOCATION, episodes, segments, server_meta
from .sql import upsert

if TYPE_CHECKING:
    from ..rollouts import Query

__all__ = [
    "PG_TEXT_CHARS",
    "Document",
    "add_documents",
    "indexed_seq",
    "locations",
    "pending",
    "places",
    "run_progress",
    "search",
]

CURSOR = "search_seq"
PG_TEXT_CHARS = 250_000
# PostgreSQL can commit seq n+1 before seq n (two writers): rows this far behind the cursor
# are looked at again for any that committed late.
PG_LATE_SEQS = 10_000

# (seq, run_seq, stream, kind, text)
Document = tuple[int, int, str, str | None, str]

_e = episodes
_LOCATION = (_e.c.seq, _e.c.run_seq, _e.c.stream, *RECORD_LOCATION)


def _postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def indexed_seq(conn: Connection) -> int:
    value = conn.execute(
        select(server_meta.c.value).where(server_meta.c.name == CURSOR)
    ).scalar_one_or_none()
    return int(value) if value is not None else 0


def pending(conn: Connection, after_seq: int, limit: int) -> list[dict[str, Any]]:
    """Index rows not yet in the search index, in seq order, with where their records are."""
    query = (
        select(*_LOCATION)
        .join(segments, segments.c.id == _e.c.segment_id)
        .order_by(_e.c.seq)
        .limit(limit)
    )
    if _postgres(conn):
        query = query.where(
            _e.c.seq > after_seq - PG_LATE_SEQS,
            text("NOT EXISTS (SELECT 1 FROM episode_search s WHERE s.seq = episodes.seq)"),
        )
    else:
        # One writer on SQLite: seqs commit in order, so the cursor alone says what is new.
        query = query.where(_e.c.seq > after_seq)
    return [dict(r) for r in conn.execute(query).mappings()]


def add_documents(conn: Connection, expected: int, new: int, docs: list[Document]) -> bool:
    """Index `docs` and move the cursor from `expected` to `new`, unless another indexer (a
    replica) moved it first: then nothing is written and False is returned."""
    if indexed_seq(conn) != expected:
        return False
    if docs:  # not the records of a run deleted since they were read (store/deletion.py)
        # On PostgreSQL the rows still there are locked (FOR KEY SHARE) until this commits: a
        # purge deleting them waits, then its next statement sees these entries and removes
        # them; a purge that deleted first makes this wait and find the rows gone. Without
        # the lock both pass each other (READ COMMITTED) and the entries outlive the run.
        seqs = [doc[0] for doc in docs]
        alive_rows = select(_e.c.seq).where(_e.c.seq.in_(seqs)).order_by(_e.c.seq)
        if _postgres(conn):
            alive_rows = alive_rows.with_for_update(read=True, key_share=True)
        alive = set(conn.execute(alive_rows).scalars())
        docs = [doc for doc in docs if doc[0] in alive]
    if docs and _postgres(conn):
        conn.execute(
            text(
                "INSERT INTO episode_search (seq, run_seq, stream, kind, doc) "
                "VALUES (:seq, :run_seq, :stream, :kind, to_tsvector('simple', :body)) "
                "ON CONFLICT (seq) DO NOTHING"
            ),
            [
                {"seq": s, "run_seq": r, "stream": st, "kind": k, "body": b[:PG_TEXT_CHARS]}
                for s, r, st, k, b in docs
            ],
        )
    elif docs:
        conn.exec_driver_sql(
            "INSERT INTO episode_search (rowid, scope, body) VALUES (?, ?, ?)",
            [(s, _scope(r, st, k), b) for s, r, st, k, b in docs],
        )
    stmt = upsert(conn, server_meta, ("name",), ("value",))
    conn.execute(stmt, {"name": CURSOR, "value": str(max(new, expected))})
    return True


def run_progress(conn: Connection, run_seq: int | Sequence[int]) -> dict[str, int]:
    """{"pending": index rows of the run (or runs) not yet searchable}."""
    cursor = indexed_seq(conn)
    runs = _runs_param(run_seq)
    if _postgres(conn):
        query = text(
            "SELECT count(*) FROM episodes e WHERE e.run_seq IN :runs AND NOT EXISTS "
            "(SELECT 1 FROM episode_search s WHERE s.seq = e.seq)"
        ).bindparams(runs)
        return {"pending": conn.execute(query).scalar_one()}
    query = text("SELECT count(*) FROM episodes WHERE run_seq IN :runs AND seq > :cursor")
    return {"pending": conn.execute(query.bindparams(runs), {"cursor": cursor}).scalar_one()}


def _runs_param(run_seq: int | Sequence[int]) -> Any:
    seqs = [run_seq] if isinstance(run_seq, int) else list(run_seq)
    return bindparam("runs", seqs, expanding=True)


def locations(conn: Connection, run_seq: int, ids: list[str]) -> dict[str, dict[str, Any]]:
    """{episode id: where its record is} (the latest record of an id logged twice)."""
    query = (
        select(_e.c.episode_id, *_LOCATION)
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.run_seq == run_seq, _e.c.episode_id.in_(ids))
        .order_by(_e.c.seq)
    )
    return {row["episode_id"]: dict(row) for row in conn.execute(query).mappings()}


def places(conn: Connection, seqs: list[int]) -> dict[int, dict[str, Any]]:
    """{seq: where the record of that index row is}."""
    query = (
        select(*_LOCATION)
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.seq.in_(seqs))
    )
    return {row["seq"]: dict(row) for row in conn.execute(query).mappings()}


def search(
    conn: Connection,
    run_seq: int | Sequence[int],
    query: Query,
    *,
    stream: str,
    kind: str | None,
    step_min: int | None,
    step_max: int | None,
    env: str | None,
    ok: bool | None,
    reward_min: float | None,
    reward_max: float | None,
    limit: int,
    before_seq: int | None,
) -> list[dict[str, Any]]:
    """Up to `limit` hits (index rows plus `seq` and `run_seq`), newest first, below
    `before_seq`, in one run or several (a cross-run search, bounded by its caller)."""
    run_seqs = [run_seq] if isinstance(run_seq, int) else list(run_seq)
    if not run_seqs:
        return []
    params: dict[str, Any] = {"limit": limit}
    where = []
    if step_min is not None or step_max is not None:
        # A step range is also a range of seqs (records of a step arrive together, give or
        # take late ones), which the full-text index can seek to instead of walking every
        # newer hit; the exact step test stays below.
        span = _seq_span(conn, run_seqs, stream, step_min, step_max)
        if span is None:
            return []
        params["seq_lo"], params["seq_hi"] = span
    for column, op, value in (
        ("e.step", ">=", step_min),
        ("e.step", "<=", step_max),
        ("e.env", "=", env),
        ("e.ok", "=", ok),
        ("e.reward", ">=", reward_min),
        ("e.reward", "<=", reward_max),
    ):
        if value is not None:
            name = f"p{len(params)}"
            where.append(f"{column} {op} :{name}")
            params[name] = value
    columns = (
        "e.seq, e.run_seq, e.episode_id AS id, e.stream, e.step, e.reward, e.env, e.ok, "
        "e.tokens, e.duration"
    )
    if _postgres(conn):
        where += ["s.run_seq IN :runs", "s.stream = :stream", "s.doc @@ to_tsquery('simple', :q)"]
        params.update(stream=stream, q=_tsquery(query))
        if kind is not None:
            where.append("s.kind = :kind")
            params["kind"] = kind
        key = "s.seq"
        source = "episode_search s JOIN episodes e ON e.seq = s.seq"
        if "seq_lo" in params:
            where.append("s.seq BETWEEN :seq_lo AND :seq_hi")
    else:
        # The runs are index tokens of the scope column: one run, or any of several.
        scope = ["(" + " OR ".join(f"r{seq}" for seq in run_seqs) + ")", f"s{_token(stream)}"]
        scope += [f"k{_token(kind)}"] if kind else []
        where += ["episode_search MATCH :q", "e.run_seq IN :runs"]
        params["q"] = " AND ".join(
            [f"scope : {t}" for t in scope] + [f"body : {p}" for p in _fts_phrases(query)]
        )
        key = "episode_search.rowid"
        source = "episode_search JOIN episodes e ON e.seq = episode_search.rowid"
        if "seq_lo" in params:
            where.append("episode_search.rowid BETWEEN :seq_lo AND :seq_hi")
    if before_seq is not None:
        where.append(f"{key} < :before")
        params["before"] = before_seq
    conditions = " AND ".join(where)
    sql = f"SELECT {columns} FROM {source} WHERE {conditions} ORDER BY {key} DESC LIMIT :limit"
    statement = text(sql).bindparams(_runs_param(run_seqs))
    rows = [dict(r) for r in conn.execute(statement, params).mappings()]
    for row in rows:  # a raw query: SQLite hands booleans back as integers
        row["ok"] = None if row["ok"] is None else bool(row["ok"])
    return rows


def _seq_span(
    conn: Connection, run_seqs: list[int], stream: str, step_min: int | None, step_max: int | None
) -> tuple[int, int] | None:
    """The lowest and highest seq of the runs' records in the step range (None: no record)."""
    query = select(func.min(_e.c.seq), func.max(_e.c.seq)).where(
        _e.c.run_seq.in_(run_seqs), _e.c.stream == stream
    )
    if step_min is not None:
        query = query.where(_e.c.step >= step_min)
    if step_max is not None:
        query = query.where(_e.c.step <= step_max)
    lo, hi = conn.execute(query).one()
    return None if lo is None else (lo, hi)


def _scope(run_seq: int, stream: str, kind: str | None) -> str:
    return f"r{run_seq} s{_token(stream)}" + (f" k{_token(kind)}" if kind else "")


def _token(value: str) -> str:
    """A scope value as one index token (letters and digits only)."""
    return re.sub(r"[^0-9A-Za-z]", "", value)[:64] or "none"


def _fts_phrases(query: Query) -> list[str]:
    # Words are letters and digits only (Query.parse), so quoting them needs no escapes.
    return [
        '"' + " ".join(words) + '"' + ("*" if star else "")
        for words, star in zip(query.terms, query.prefix, strict=True)
    ]


def _tsquery(query: Query) -> str:
    return " & ".join(
        "(" + " <-> ".join(words) + (":*" if star else "") + ")"
        for words, star in zip(query.terms, query.prefix, strict=True)
    )
