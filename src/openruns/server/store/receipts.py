"""
Receipts of bulk uploads, by (run, kind, Idempotency-Key): a replay gets the first answer.

The key is the table's primary key, so the database itself refuses a second receipt: the
writer checks `get_receipt` under the run's lock (sql.lock_run), and `put_receipt` is a plain
INSERT on purpose, so that a duplicate that got past a check fails and rolls back the upload
it belongs to instead of being ignored after its data was written.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Connection, insert, select

from .schema import receipts

__all__ = ["get_receipt", "put_receipt"]


def get_receipt(conn: Connection, run_seq: int, kind: str, key: str) -> dict[str, Any] | None:
    query = select(receipts.c.response).where(
        receipts.c.run_seq == run_seq, receipts.c.kind == kind, receipts.c.key == key
    )
    text = conn.execute(query).scalar()
    return orjson.loads(text) if text is not None else None


def put_receipt(
    conn: Connection, run_seq: int, kind: str, key: str, response: dict[str, Any], now: float
) -> None:
    conn.execute(
        insert(receipts).values(
            run_seq=run_seq,
            kind=kind,
            key=key,
            response=orjson.dumps(response).decode(),
            created_at=now,
        )
    )
