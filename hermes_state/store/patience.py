"""How long the store's handles wait for other processes' locks (the patience constants and
``Waiting``), and the loops that wait: the write transaction retried with jitter, and the retry
of work outside a transaction (opening, laying out, VACUUM)."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hermes_state.store.errors import (
    StoreCorruptError,
    StoreLockedError,
    is_corruption_error,
    is_lock_error,
)
from hermes_state.store.store_file import write_error

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

T = TypeVar("T")


WRITE_PATIENCE_S = 20.0


TRANSCRIPT_WRITE_PATIENCE_S = 60.0


ACTIVITY_WRITE_PATIENCE_S = 0.5


BUSY_TIMEOUT_S = 1.0


READ_BUSY_TIMEOUT_S = 5.0


RETRY_FAST_S = (0.020, 0.150)


RETRY_SLOW_S = (0.250, 1.000)


RETRY_SLOW_AFTER_S = 2.0


WAIT_NOTICE_S = 1.0  # a wait for another process's lock this long is worth telling about


@dataclass(frozen=True)
class Waiting:
    """How a store handle waits for other processes' locks.

    ``patience`` (seconds) replaces the handle's default waits (None: keep them; 0: try once).
    ``notify(path, waited_s)`` is called once per wait that passes ``WAIT_NOTICE_S``, so an
    interactive caller can say who holds the lock instead of a silent pause.
    """

    patience: float | None = None
    notify: Callable[[Path, float], None] | None = None

    def limit(self, default: float) -> float:
        """Return how long to wait where the default would be ``default`` seconds."""
        return default if self.patience is None else max(0.0, self.patience)

    def tell(self, path: Path, waited: float) -> None:
        """Call notify (never letting it fail the wait)."""
        if self.notify is not None:
            with contextlib.suppress(Exception):
                self.notify(path, waited)


NO_WAITING = Waiting()


def run_with_patience(store: Store, fn: Callable[[sqlite3.Connection], T], patience: float) -> T:
    """Run fn(conn) in one write transaction, retrying lock errors for up to patience seconds."""
    conn = store.conn
    start = time.monotonic()
    deadline = start + patience
    busy_ms = store.read_busy_ms  # what the connection has now (its reads' patience)
    told = False
    while True:
        remaining = deadline - time.monotonic()
        # SQLite's own wait must not overrun a short budget (a 0.5 s activity write fails fast).
        want_ms = max(1, min(int(BUSY_TIMEOUT_S * 1000), int(remaining * 1000)))
        if want_ms != busy_ms:
            conn.execute(f"PRAGMA busy_timeout = {want_ms}")
            busy_ms = want_ms
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if busy_ms != store.read_busy_ms:
                conn.execute(f"PRAGMA busy_timeout = {store.read_busy_ms}")
            return result
        except sqlite3.Error as exc:
            if is_corruption_error(exc):
                store.mark_damaged()
                raise StoreCorruptError(f"{store.path} is damaged: {exc}") from exc
            if not is_lock_error(exc):
                # A full disk or a read-only file or place is said as such, with the path.
                typed = write_error(store, exc)
                if typed is not None:
                    raise typed from exc
                raise
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                waited = now - start
                conn.execute(f"PRAGMA busy_timeout = {store.read_busy_ms}")
                who = report_lock_holders(store.path, waited)
                raise StoreLockedError(
                    f"{store.path.name} stayed locked by another process for {waited:.1f}s "
                    f"(patience {patience:g}s){who}; the write was not made"
                ) from exc
            if not told and now - start >= WAIT_NOTICE_S:
                told = True
                store.waiting.tell(store.path, now - start)
            fast = (now - start) < RETRY_SLOW_AFTER_S
            low, high = RETRY_FAST_S if fast else RETRY_SLOW_S
            time.sleep(min(random.uniform(low, high), remaining))


def report_lock_holders(db_path: Path, waited_s: float) -> str:
    """Log the one WARNING naming who holds the write lock (called when patience runs out);
    return ' (held by ...)' for the error message, or '' when nobody could be named."""
    from hermes_state.store.lockowners import log_write_lock_holders, write_holders_text

    log_write_lock_holders(db_path, waited_s)
    try:
        who = write_holders_text(db_path)
    except Exception:  # diagnostics must never turn a lock timeout into a crash
        return ""
    return f" (held by {who})" if who else ""


def retry_locked(
    path: Path,
    fn: Callable[[], T],
    waiting: Waiting = NO_WAITING,
    default_patience: float = WRITE_PATIENCE_S,
    not_done: str = "",
) -> T:
    """Call fn, retrying lock errors with jitter for up to the handle's patience.

    The one retry loop for work outside a write transaction (opening, laying out, VACUUM);
    ``not_done`` ends the lock error's message (e.g. "; VACUUM was not run").
    """
    patience = waiting.limit(default_patience)
    start = time.monotonic()
    told = False
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
                raise
            waited = time.monotonic() - start
            if waited >= patience:
                who = report_lock_holders(path, waited)
                raise StoreLockedError(
                    f"{path.name} stayed locked for {waited:.1f}s{who}{not_done}"
                ) from exc
            if not told and waited >= WAIT_NOTICE_S:
                told = True
                waiting.tell(path, waited)
            time.sleep(min(random.uniform(*RETRY_FAST_S), patience - waited))
