"""One look at a live store, for `hermes watch`: the sessions active now with their last message
and rate, messages per minute, file sizes, lock holders, the runtime ledger, gateway heartbeats.

A snapshot opens the store (read-only), runs a few short statements, each its own read (no
transaction spans two of them, so a writer waits for one short statement at most), closes it
again, and only then looks at locks and file sizes (os.stat and /proc: no SQLite). Between
snapshots nothing is open: what a watcher remembers (the newest message id it has seen, the
sessions recently written to) is plain data in WatchState, so each later snapshot reads only the
messages written since the last one.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_state.records.ledger import OPEN_ADMISSION_STATUSES, OPEN_EXECUTION_STATUSES
from hermes_state.store.connection import Store
from hermes_state.store.errors import (
    HermesStateError,
    HomeNotFoundError,
    StoreBusyError,
    StoreCorruptError,
    StoreLockedError,
    StoreNotFoundError,
    is_corruption_error,
    is_lock_error,
)
from hermes_state.store.lockowners import LockReport, lock_holders
from hermes_state.store.schema import stored_version
from hermes_state.store.sql import SIDECAR_SUFFIXES, marks

ACTIVE_WINDOW_S = 300.0  # a session written to this recently is active now
RATE_WINDOW_S = 60.0  # messages per minute are counted over this window
TAIL_ROWS = 2000  # the newest messages a first snapshot reads to find active sessions
NEW_ROWS_MAX = 5000  # messages a later snapshot reads; more than that: read the tail again
MAX_ACTIVE = 20  # active sessions described (all of them are counted)
PREVIEW_CHARS = 200
MAX_HEARTBEATS = 20
HEARTBEAT_STALE_S = 150.0  # the agent's own freshness limit for a gateway heartbeat

Opener = Callable[[], AbstractContextManager[Store]]


@dataclass
class WatchState:
    """What a watcher remembers between snapshots (never a connection or a transaction)."""

    high_id: int | None = None  # the newest message id read so far
    seen: dict[str, float] = field(default_factory=dict)  # session id -> newest message time


@dataclass(frozen=True)
class ActiveSession:
    """A session written to within ACTIVE_WINDOW_S: what it is and what it last said."""

    session_id: str
    title: str | None
    source: str | None
    model: str | None
    last_message_at: float | None
    last_role: str | None
    last_preview: str | None  # the first PREVIEW_CHARS of its newest message (or tool name)
    messages_last_minute: int


@dataclass(frozen=True)
class LedgerCounts:
    """Open work of the runtime ledger: admissions and worker executions by status."""

    present: bool
    epoch: int | None = None
    admissions: dict[str, int] = field(default_factory=dict)
    executions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Heartbeat:
    """A gateway backend's liveness row (the agent's gateway_heartbeats)."""

    backend_id: str
    pid: int | None
    host: str | None
    profile: str | None
    started_at: float | None
    last_heartbeat: float | None
    age_s: float | None
    stale: bool  # older than HEARTBEAT_STALE_S
    alive: bool | None  # the pid exists (None: another host, or cannot be told)


@dataclass(frozen=True)
class StoreView:
    """What the store itself says at one moment."""

    schema_version: int | None
    journal_mode: str
    newest_message_id: int | None
    messages_per_minute: int
    active_count: int
    active: list[ActiveSession]
    ledger: LedgerCounts
    heartbeats: list[Heartbeat]


@dataclass(frozen=True)
class Snapshot:
    """One refresh: the store's view (or why it could not be read), files, locks, cost."""

    path: Path
    taken_at: float
    files: dict[str, int]
    view: StoreView | None
    problem: str | None  # missing, busy, corrupt or error; None when the store was read
    problem_message: str | None
    locks: LockReport
    store_ms: float  # how long the store was open for this snapshot

    def to_dict(self) -> dict[str, Any]:
        """Return the plain form (epoch floats, as stored)."""
        return {
            "path": str(self.path),
            "taken_at": self.taken_at,
            "files": dict(self.files),
            "view": asdict(self.view) if self.view is not None else None,
            "problem": self.problem,
            "problem_message": self.problem_message,
            "locks": self.locks.to_dict(),
            "store_ms": self.store_ms,
        }


def file_sizes(path: Path) -> dict[str, int]:
    """Return the sizes of the store and its sidecars (db, wal, shm, journal; 0 when absent)."""
    sizes = {}
    for suffix in ("", *SIDECAR_SUFFIXES):
        try:
            sizes[suffix[1:] or "db"] = os.stat(f"{path}{suffix}").st_size
        except OSError:
            sizes[suffix[1:] or "db"] = 0
    return sizes


def _num(value: Any) -> float | None:
    """Return a stored number as a float (text or garbage a foreign writer left: None)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _read_since(store: Store, high_id: int | None, limit: int) -> tuple[int, int | None, Any]:
    """Return (rows read, their newest id, per session its newest numeric time) of the newest
    ``limit`` messages, or of the first ``limit`` after high_id."""
    if high_id is None:
        inner = "SELECT id, session_id, timestamp FROM messages ORDER BY id DESC LIMIT ?"
        params: tuple[Any, ...] = (limit,)
    else:
        inner = "SELECT id, session_id, timestamp FROM messages WHERE id > ? ORDER BY id LIMIT ?"
        params = (high_id, limit)
    # Summed in SQL, so a tail of thousands of rows costs Python a row per session.
    rows = store.conn.execute(
        "SELECT session_id, MAX(CASE WHEN typeof(timestamp) IN ('real', 'integer')"
        f" THEN timestamp END), MAX(id), COUNT(*) FROM ({inner}) GROUP BY session_id",
        params,
    ).fetchall()
    read = sum(int(r[3]) for r in rows)
    newest = max((int(r[2]) for r in rows), default=None)
    return read, newest, [(r[0], _num(r[1])) for r in rows]


def _new_messages(store: Store, state: WatchState, now: float) -> None:
    """Read the messages written since the last snapshot (or the newest ones) into state."""
    found: Any = []
    if state.high_id is not None:
        read, newest, found = _read_since(store, state.high_id, NEW_ROWS_MAX + 1)
        if read > NEW_ROWS_MAX:
            state.high_id = None  # too far behind: start again from the newest
        elif not read:
            top = store.conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
            if top is not None and top < state.high_id:
                state.high_id = None  # ids went back: another store is in place (a restore)
        else:
            state.high_id = newest
    if state.high_id is None:
        _, newest, found = _read_since(store, None, TAIL_ROWS)
        state.high_id = newest or 0
    for session_id, stamp in found:
        if stamp is not None and isinstance(session_id, str):
            state.seen[session_id] = max(stamp, state.seen.get(session_id, stamp))
    cutoff = now - ACTIVE_WINDOW_S
    for session_id in [s for s, ts in state.seen.items() if ts < cutoff]:
        del state.seen[session_id]


def _recently_started(store: Store, now: float) -> dict[str, float]:
    """Return sessions whose activity stamp or start is within the window (index-served)."""
    if "last_activity_at" not in store.columns("sessions"):
        sql = "SELECT id, started_at FROM sessions WHERE started_at >= ?"
    else:
        # The expression of the agent's idx_sessions_effective_activity, so that index serves it.
        sql = (
            "SELECT id, COALESCE(last_activity_at, started_at) FROM sessions"
            " WHERE COALESCE(last_activity_at, started_at) >= ?"
        )
    rows = store.conn.execute(sql, (now - ACTIVE_WINDOW_S,)).fetchall()
    return {r[0]: t for r in rows if (t := _num(r[1])) is not None}


def _active_sessions(store: Store, state: WatchState, now: float) -> tuple[int, int, list[Any]]:
    """Return (active count, messages in the last minute, the MAX_ACTIVE newest described)."""
    conn = store.conn
    recent = dict(_recently_started(store, now))
    for session_id, ts in state.seen.items():
        recent[session_id] = max(ts, recent.get(session_id, ts))
    ids = sorted(recent, key=lambda s: recent[s], reverse=True)
    counts: dict[str, int] = {}
    for i in range(0, len(ids), 400):
        batch = ids[i : i + 400]
        for session_id, n in conn.execute(
            "SELECT session_id, COUNT(*) FROM messages"
            f" WHERE session_id IN ({marks(len(batch))}) AND timestamp >= ? GROUP BY session_id",
            (*batch, now - RATE_WINDOW_S),
        ):
            counts[session_id] = int(n)
    shown = ids[:MAX_ACTIVE]
    if not shown:
        return 0, 0, []
    info = {
        r[0]: r
        for r in conn.execute(
            f"SELECT id, title, source, model FROM sessions WHERE id IN ({marks(len(shown))})",
            shown,
        )
    }
    active = []
    for session_id in shown:
        row = info.get(session_id)
        if row is None:
            continue  # deleted meanwhile
        last = conn.execute(
            f"SELECT role, substr(COALESCE(content, ''), 1, {PREVIEW_CHARS}), tool_name,"
            " timestamp FROM messages WHERE session_id = ? ORDER BY timestamp DESC, id DESC"
            " LIMIT 1",
            (session_id,),
        ).fetchone()
        preview = None
        if last is not None:
            preview = last[1] or (f"[{last[2]}]" if last[2] else None)
        active.append(
            ActiveSession(
                session_id=session_id,
                title=row["title"],
                source=row["source"],
                model=row["model"],
                last_message_at=_num(last[3]) if last is not None else None,
                last_role=last[0] if last is not None else None,
                last_preview=preview,
                messages_last_minute=counts.get(session_id, 0),
            )
        )
    return len(ids), sum(counts.values()), active


def _ledger(store: Store) -> LedgerCounts:
    """Return the ledger's open admissions and executions by status (absent: present=False)."""
    if not (store.has_table("session_admissions") and store.has_table("worker_executions")):
        return LedgerCounts(present=False)
    conn = store.conn
    epoch = None
    if store.has_table("runtime_epoch"):
        row = conn.execute("SELECT epoch FROM runtime_epoch WHERE singleton = 1").fetchone()
        epoch = int(row[0]) if row is not None and row[0] is not None else None
    counts = []
    for table, statuses in (
        ("session_admissions", OPEN_ADMISSION_STATUSES),
        ("worker_executions", OPEN_EXECUTION_STATUSES),
    ):
        found = dict.fromkeys(statuses, 0)
        for status, n in conn.execute(
            f"SELECT status, COUNT(*) FROM {table} WHERE status IN ({marks(len(statuses))})"
            " GROUP BY status",
            statuses,
        ):
            found[status] = int(n)
        counts.append(found)
    return LedgerCounts(present=True, epoch=epoch, admissions=counts[0], executions=counts[1])


def _pid_alive(pid: int | None, host: str | None) -> bool | None:
    """Tell whether a heartbeat's process exists, when it runs on this host."""
    if pid is None or pid <= 0 or (host and host != socket.gethostname()):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


def _heartbeats(store: Store, now: float) -> list[Heartbeat]:
    """Return the gateway backends' heartbeats, newest first."""
    if not store.has_table("gateway_heartbeats"):
        return []
    rows = store.conn.execute(
        "SELECT backend_id, pid, started_at, last_heartbeat, profile, host"
        " FROM gateway_heartbeats ORDER BY last_heartbeat DESC LIMIT ?",
        (MAX_HEARTBEATS,),
    ).fetchall()
    out = []
    for backend_id, pid, started, last, profile, host in rows:
        beat = _num(last)
        age = None if beat is None else max(0.0, now - beat)
        pid_n = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        out.append(
            Heartbeat(
                backend_id=str(backend_id),
                pid=pid_n,
                host=host if isinstance(host, str) else None,
                profile=profile if isinstance(profile, str) else None,
                started_at=_num(started),
                last_heartbeat=beat,
                age_s=age,
                stale=age is None or age > HEARTBEAT_STALE_S,
                alive=_pid_alive(pid_n, host if isinstance(host, str) else None),
            )
        )
    return out


def read_view(store: Store, state: WatchState, *, now: float | None = None) -> StoreView:
    """Read what the store says now (each statement its own short read) and update state."""
    now = time.time() if now is None else now
    _new_messages(store, state, now)
    active_count, per_minute, active = _active_sessions(store, state, now)
    return StoreView(
        schema_version=stored_version(store.conn),
        journal_mode=store.journal_mode,
        newest_message_id=state.high_id or None,
        messages_per_minute=per_minute,
        active_count=active_count,
        active=active,
        ledger=_ledger(store),
        heartbeats=_heartbeats(store, now),
    )


def problem_of(exc: BaseException) -> str:
    """Classify why a store could not be read: missing, busy, corrupt or error."""
    if isinstance(exc, StoreNotFoundError | HomeNotFoundError):
        return "missing"
    if isinstance(exc, StoreLockedError | StoreBusyError) or is_lock_error(exc):
        return "busy"
    if isinstance(exc, StoreCorruptError) or is_corruption_error(exc):
        return "corrupt"
    return "error"


def take_snapshot(
    path: Path, state: WatchState, opener: Opener, *, now: float | None = None
) -> Snapshot:
    """Open the store with opener, read its view, close it; then read locks and file sizes.

    A store that cannot be read (missing, busy, damaged) gives a snapshot with ``problem`` set
    instead of raising, so a live view keeps going and says what is wrong.
    """
    taken = time.time() if now is None else now
    view: StoreView | None = None
    problem = message = None
    started = time.perf_counter()
    try:
        with opener() as store:
            view = read_view(store, state, now=taken)
    except (HermesStateError, sqlite3.Error) as exc:
        problem = problem_of(exc)
        message = exc.message if isinstance(exc, HermesStateError) else str(exc)
    store_ms = (time.perf_counter() - started) * 1000
    return Snapshot(
        path=path,
        taken_at=taken,
        files=file_sizes(path),
        view=view,
        problem=problem,
        problem_message=message,
        locks=lock_holders(path),
        store_ms=store_ms,
    )
