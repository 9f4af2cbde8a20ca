"""The agent's per-session compression bookkeeping: the cross-process compression lock, the
failure cooldown after a compression that did not work, and the fallback streak.

The lock is a row of ``compression_locks`` with an expiry: a compressor that dies leaves a row
that the next claimant takes over once it has expired, so a crash never blocks a session for
good. Holders compare by their exact text, so a late compressor cannot release a lock another
one took over.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store

log = logging.getLogger("hermes_state")

DEFAULT_LOCK_TTL_S = 300.0


def try_acquire_compression_lock(
    store: Store, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL_S
) -> bool:
    """Claim a session's compression lock (an expired one is taken over); tell whether we hold it.

    False means another holder has a live lock and the caller must not compress; a store that
    cannot be written also answers False (skipping a compression is always safe).
    """
    if not session_id:
        return False
    now = time.time()
    sid, who = bindable(session_id), bindable(holder)

    def fn(conn: sqlite3.Connection) -> bool:
        row = conn.execute(
            "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (sid,)
        ).fetchone()
        if row is not None:
            if float(row[1]) > now:
                return False
            log.warning("Took over the expired compression lock of %s (holder %s)", sid, row[0])
            conn.execute("DELETE FROM compression_locks WHERE session_id = ?", (sid,))
        conn.execute(
            "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (sid, who, now, now + float(ttl_seconds)),
        )
        return True

    try:
        return store.write(fn)
    except Exception as exc:  # the lock is advisory: failing closed (no compression) is safe
        log.warning("compression lock for %s could not be taken: %s", sid, exc)
        return False


def refresh_compression_lock(
    store: Store, session_id: str, holder: str, ttl_seconds: float = DEFAULT_LOCK_TTL_S
) -> bool:
    """Extend a lock this holder still owns (and has not let expire); tell whether it did."""
    if not session_id:
        return False
    now = time.time()

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            "UPDATE compression_locks SET expires_at = ? "
            "WHERE session_id = ? AND holder = ? AND expires_at > ?",
            (now + float(ttl_seconds), bindable(session_id), bindable(holder), now),
        )
        return cur.rowcount > 0

    return store.write(fn)


def release_compression_lock(store: Store, session_id: str, holder: str) -> None:
    """Release a session's compression lock if this holder owns it (otherwise do nothing)."""
    if not session_id:
        return
    store.write(
        lambda conn: conn.execute(
            "DELETE FROM compression_locks WHERE session_id = ? AND holder = ?",
            (bindable(session_id), bindable(holder)),
        )
    )


def compression_lock_holder(store: Store, session_id: str) -> str | None:
    """Return who holds a session's live compression lock (None: unlocked or expired)."""
    if not session_id:
        return None
    row = store.conn.execute(
        "SELECT holder FROM compression_locks WHERE session_id = ? AND expires_at > ?",
        (bindable(session_id), time.time()),
    ).fetchone()
    return None if row is None else str(row[0])


def record_failure_cooldown(
    store: Store, session_id: str, cooldown_until: float, error: str | None = None
) -> None:
    """Remember that compressing a session failed: no new attempt before cooldown_until."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET compression_failure_cooldown_until = ?, "
            "compression_failure_error = ? WHERE id = ?",
            (float(cooldown_until), bindable(error), bindable(session_id)),
        )
    )


def failure_cooldown(store: Store, session_id: str) -> dict[str, Any] | None:
    """Return a session's live compression cooldown ({cooldown_until, error}), or None."""
    row = store.conn.execute(
        "SELECT compression_failure_cooldown_until, compression_failure_error FROM sessions "
        "WHERE id = ?",
        (bindable(session_id),),
    ).fetchone()
    if row is None or row[0] is None or float(row[0]) <= time.time():
        return None
    return {"cooldown_until": float(row[0]), "error": row[1]}


def clear_failure_cooldown(store: Store, session_id: str) -> None:
    """Forget a session's compression cooldown."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET compression_failure_cooldown_until = NULL, "
            "compression_failure_error = NULL WHERE id = ?",
            (bindable(session_id),),
        )
    )


def fallback_streak(store: Store, session_id: str) -> int:
    """Return how many compressions in a row fell back to the simple summary."""
    if "compression_fallback_streak" not in store.columns("sessions"):
        return 0
    row = store.conn.execute(
        "SELECT compression_fallback_streak FROM sessions WHERE id = ?", (bindable(session_id),)
    ).fetchone()
    return int(row[0] or 0) if row is not None else 0


def set_fallback_streak(store: Store, session_id: str, streak: int) -> None:
    """Record the fallback streak of a session (never below 0)."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET compression_fallback_streak = ? WHERE id = ?",
            (max(0, int(streak)), bindable(session_id)),
        )
    )
