"""
Receipts of bulk uploads, by (run, kind, Idempotency-Key): a replay gets the first answer.

The key is the table's primary key, so the database itself refuses a second receipt: the
writer checks `get_receipt` under the run's lock (sql.lock_run), and `put_receipt` is a plain
INSERT on purpose, so that a duplicate that got past a check fails and rolls back the upload
it belongs to instead of being ignored after its data was written.

A receipt keeps the SHA-256 of the body it answered (`digest`, migration 0009): the same key
with another body is refused (422 naming the key), never answered with the first receipt
while the second body is dropped. Receipts written before 0009 have no digest and answer any
body, as they did.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Connection, insert, select

from ..errors import ApiError
from .schema import receipts

__all__ = ["get_receipt", "key_reused", "put_receipt"]


def get_receipt(
    conn: Connection, run_seq: int, kind: str, key: str, digest: str | None = None
) -> dict[str, Any] | None:
    """The first answer to `key`, or None; 422 when it answered another body than the one
    whose SHA-256 is `digest` (None: not checked)."""
    query = select(receipts.c.response, receipts.c.digest).where(
        receipts.c.run_seq == run_seq, receipts.c.kind == kind, receipts.c.key == key
    )
    row = conn.execute(query).first()
    if row is None:
        return None
    if digest is not None and row.digest is not None and row.digest != digest:
        raise key_reused(key)
    answer: dict[str, Any] = orjson.loads(row.response)
    return answer


def put_receipt(
    conn: Connection,
    run_seq: int,
    kind: str,
    key: str,
    response: dict[str, Any],
    now: float,
    digest: str | None = None,
) -> None:
    conn.execute(
        insert(receipts).values(
            run_seq=run_seq,
            kind=kind,
            key=key,
            response=orjson.dumps(response).decode(),
            created_at=now,
            digest=digest,
        )
    )


def key_reused(key: str) -> ApiError:
    return ApiError(
        422,
        "idempotency_key_reused",
        f"Idempotency-Key {key!r} was used before with another body: a key names one upload; "
        "send a new key with new data",
    )
