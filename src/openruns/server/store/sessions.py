"""
Dashboard sessions (migration 0008): opened by signing in with an API key, ended by signing
out, by their lifetime, or by revoking the key. Only the SHA-256 of a session's token is
stored, so the table's contents cannot be replayed as cookies.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select

from .schema import api_keys, sessions

__all__ = ["close_session", "open_session", "session_caller"]


def open_session(
    conn: Connection, token_hash: str, key_id: int, team_id: str, now: float, expires_at: float
) -> None:
    """Store a new session (and forget those that have expired)."""
    conn.execute(delete(sessions).where(sessions.c.expires_at <= now))
    conn.execute(
        insert(sessions).values(
            token_hash=token_hash,
            key_id=key_id,
            team_id=team_id,
            created_at=now,
            expires_at=expires_at,
        )
    )


def session_caller(conn: Connection, token_hash: str, now: float) -> tuple[int, str, float] | None:
    """(key id, team, expires at) of a live session whose key is not revoked, else None."""
    row = conn.execute(
        select(sessions.c.key_id, sessions.c.team_id, sessions.c.expires_at)
        .join(api_keys, api_keys.c.id == sessions.c.key_id)
        .where(
            sessions.c.token_hash == token_hash,
            sessions.c.expires_at > now,
            api_keys.c.revoked_at.is_(None),
        )
    ).first()
    return (row[0], row[1], row[2]) if row else None


def close_session(conn: Connection, token_hash: str) -> None:
    conn.execute(delete(sessions).where(sessions.c.token_hash == token_hash))
