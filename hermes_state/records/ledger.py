"""Runtime ledger: owner epochs, the durable per-session input FIFO, worker executions, receipts.

Work that was ``started``/``running`` when its owner went away becomes ``unknown`` at the next
owner epoch and is never retried automatically; later inputs of that session wait until it is
resolved (``resolve_unknown``, the prompt.resolve_unknown operation).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from hermes_state.records.sessions import require_session_in
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError
from hermes_state.store.sql import chunks, marks

EXECUTION_KINDS = frozenset({"cron", "child", "compute", "kanban"})
OUTCOMES = frozenset({"completed", "interrupted", "rejected", "failed", "cancelled"})
OPEN_ADMISSION_STATUSES = ("queued", "started", "unknown")
OPEN_EXECUTION_STATUSES = ("registered", "running", "unknown")
MAX_TEXT = 1024
MAX_RECEIPT_BYTES = 4 * 1024 * 1024


class LedgerError(HermesStateError):
    """A runtime-ledger operation that cannot be applied."""

    hint = "Re-read the ledger row; another owner may have moved it on."


class LedgerNotFoundError(LedgerError, LookupError):
    """No admission or execution with that id."""


class LedgerStateError(LedgerError):
    """The row is not in a state that allows this transition."""


class StaleEpochError(LedgerError):
    """The caller's owner epoch is not the current one: another owner has started since."""

    hint = "This process is no longer the owner; stop and let the current owner continue."


class AdmissionConflictError(LedgerError):
    """The request id was already admitted with a different payload."""

    hint = "Use a new request id for a different input."


class ExecutionConflictError(LedgerError):
    """The execution id is already registered for another session or kind."""


class ReceiptConflictError(LedgerError):
    """A receipt sequence was already recorded with a different payload."""


class ReceiptSequenceError(LedgerError):
    """A receipt sequence that is not the next one (a gap, or not positive)."""


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """One row of a session's input FIFO."""

    admission_id: str
    seq: int
    session_id: str
    request_id: str
    payload_json: str
    payload_digest: str
    status: str
    outcome: str | None
    owner_epoch: int | None
    created_at: float
    updated_at: float

    @property
    def payload(self) -> dict[str, Any]:
        """The admitted payload, decoded."""
        value: dict[str, Any] = json.loads(self.payload_json)
        return value

    def to_dict(self) -> dict[str, Any]:
        """Return the admission as plain JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class Execution:
    """A managed worker execution bound to a session and an owner epoch."""

    execution_id: str
    session_id: str
    kind: str
    owner_epoch: int | None
    status: str
    last_sequence: int
    created_at: float
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        """Return the execution as plain JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class Receipt:
    """One ordered, digest-checked result a worker reported."""

    execution_id: str
    sequence: int
    payload_digest: str
    result_json: str
    created_at: float

    @property
    def payload(self) -> dict[str, Any]:
        """The reported payload, decoded."""
        value: dict[str, Any] = json.loads(self.result_json)
        return value

    def to_dict(self) -> dict[str, Any]:
        """Return the receipt as plain JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class OpenWork:
    """A ledger row that still pins its session (not terminal)."""

    kind: str  # "admission" or "execution"
    id: str
    session_id: str
    status: str

    def describe(self) -> str:
        """Say which row it is, e.g. "admission a1 (started)"."""
        return f"{self.kind} {self.id} ({self.status})"

    def to_dict(self) -> dict[str, Any]:
        """Return the row as plain JSON-ready data."""
        return asdict(self)


# --- helpers --------------------------------------------------------------------------------


def canonical_json(payload: Mapping[str, Any]) -> str:
    """Serialise a JSON object canonically (sorted keys, compact separators, no NaN)."""
    if not isinstance(payload, Mapping):
        raise TypeError("ledger payloads must be JSON objects (dicts)")
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def payload_digest(payload: Mapping[str, Any]) -> str:
    """Return the sha256 hex digest of a payload's canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def _check_outcome(outcome: str) -> str:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(sorted(OUTCOMES))}, not {outcome!r}")
    return outcome


def _admission(row: sqlite3.Row) -> Admission:
    return Admission(
        admission_id=row["admission_id"],
        seq=int(row["seq"]),
        session_id=row["session_id"],
        request_id=row["request_id"],
        payload_json=row["payload_json"],
        payload_digest=row["payload_digest"],
        status=row["status"],
        outcome=row["outcome"],
        owner_epoch=row["owner_epoch"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _execution(row: sqlite3.Row) -> Execution:
    return Execution(
        execution_id=row["execution_id"],
        session_id=row["session_id"],
        kind=row["kind"],
        owner_epoch=row["owner_epoch"],
        status=row["status"],
        last_sequence=int(row["last_sequence"] or 0),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _receipt(row: sqlite3.Row) -> Receipt:
    return Receipt(
        execution_id=row["execution_id"],
        sequence=int(row["sequence"]),
        payload_digest=row["payload_digest"],
        result_json=row["result_json"],
        created_at=row["created_at"],
    )


_ADMISSION_COLS = (
    "admission_id, seq, session_id, request_id, payload_json, payload_digest, status, outcome,"
    " owner_epoch, created_at, updated_at"
)
_EXECUTION_COLS = (
    "execution_id, session_id, kind, owner_epoch, status, last_sequence, created_at, updated_at"
)


def _load_admission(conn: sqlite3.Connection, admission_id: str) -> Admission:
    row = conn.execute(
        f"SELECT {_ADMISSION_COLS} FROM session_admissions WHERE admission_id = ?",
        (admission_id,),
    ).fetchone()
    if row is None:
        raise LedgerNotFoundError(f"No admission with id {admission_id}")
    return _admission(row)


def _load_execution(conn: sqlite3.Connection, execution_id: str) -> Execution:
    row = conn.execute(
        f"SELECT {_EXECUTION_COLS} FROM worker_executions WHERE execution_id = ?",
        (execution_id,),
    ).fetchone()
    if row is None:
        raise LedgerNotFoundError(f"No execution with id {execution_id}")
    return _execution(row)


def epoch_in(conn: sqlite3.Connection) -> int:
    """Return the current owner epoch (0 before any owner has started)."""
    row = conn.execute("SELECT epoch FROM runtime_epoch WHERE singleton = 1").fetchone()
    return int(row[0]) if row else 0


def _require_epoch(conn: sqlite3.Connection, epoch: int) -> None:
    current = epoch_in(conn)
    if int(epoch) != current:
        raise StaleEpochError(f"Owner epoch {epoch} is stale (current epoch is {current})")


# --- owner epoch ----------------------------------------------------------------------------


def current_epoch(store: Store) -> int:
    """Return the current owner epoch (0 before any owner has started)."""
    return epoch_in(store.conn)


def begin_owner_epoch(store: Store, instance_id: str) -> int:
    """Start a new owner epoch; in-flight work of older epochs becomes unknown. Return it."""
    _check_text("instance_id", instance_id)

    def fn(conn: sqlite3.Connection) -> int:
        now = time.time()
        conn.execute(
            "INSERT INTO runtime_epoch (singleton, epoch, instance_id, updated_at)"
            " VALUES (1, 1, ?, ?) ON CONFLICT(singleton) DO UPDATE SET"
            " epoch = runtime_epoch.epoch + 1, instance_id = excluded.instance_id,"
            " updated_at = excluded.updated_at",
            (instance_id, now),
        )
        epoch = epoch_in(conn)
        # Never retried: whether it ran is unknown, and running it twice could repeat effects.
        conn.execute(
            "UPDATE session_admissions SET status = 'unknown', updated_at = ?"
            " WHERE status = 'started' AND (owner_epoch IS NULL OR owner_epoch < ?)",
            (now, epoch),
        )
        conn.execute(
            "UPDATE worker_executions SET status = 'unknown', updated_at = ?"
            " WHERE status = 'running' AND (owner_epoch IS NULL OR owner_epoch < ?)",
            (now, epoch),
        )
        return epoch

    return store.write(fn)


# --- admissions -----------------------------------------------------------------------------


def get_admission(store: Store, admission_id: str) -> Admission:
    """Return one admission, or raise LedgerNotFoundError."""
    return _load_admission(store.conn, admission_id)


def list_admissions(store: Store, session_id: str) -> list[Admission]:
    """Return a session's admissions in FIFO order."""
    rows = store.conn.execute(
        f"SELECT {_ADMISSION_COLS} FROM session_admissions WHERE session_id = ? ORDER BY seq",
        (session_id,),
    ).fetchall()
    return [_admission(r) for r in rows]


def admit(store: Store, session_id: str, request_id: str, payload: Mapping[str, Any]) -> Admission:
    """Queue an input for a session; the same request id and payload returns the same admission."""
    _check_text("request_id", request_id)
    text = canonical_json(payload)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    admission_id = f"adm_{uuid.uuid4().hex}"

    def fn(conn: sqlite3.Connection) -> Admission:
        require_session_in(conn, session_id)
        row = conn.execute(
            f"SELECT {_ADMISSION_COLS} FROM session_admissions"
            " WHERE session_id = ? AND request_id = ?",
            (session_id, request_id),
        ).fetchone()
        if row is not None:
            existing = _admission(row)
            if existing.payload_digest != digest:
                raise AdmissionConflictError(
                    f"Request {request_id} of session {session_id} was already admitted "
                    f"({existing.admission_id}) with a different payload"
                )
            return existing
        now = time.time()
        conn.execute(
            "INSERT INTO session_admissions (admission_id, session_id, request_id, payload_json,"
            " payload_digest, status, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
            (admission_id, session_id, request_id, text, digest, now, now),
        )
        return _load_admission(conn, admission_id)

    return store.write(fn)


def next_admission(store: Store, session_id: str) -> Admission | None:
    """Return the oldest queued admission, or None while one is started or unknown."""
    row = store.conn.execute(
        f"SELECT {_ADMISSION_COLS} FROM session_admissions"
        " WHERE session_id = ? AND status = 'queued' AND NOT EXISTS ("
        "  SELECT 1 FROM session_admissions WHERE session_id = ?"
        "  AND status IN ('started', 'unknown'))"
        " ORDER BY seq LIMIT 1",
        (session_id, session_id),
    ).fetchone()
    return _admission(row) if row else None


def start(store: Store, admission_id: str, epoch: int) -> Admission:
    """Move the session's next queued admission to started under the given (current) epoch."""

    def fn(conn: sqlite3.Connection) -> Admission:
        adm = _load_admission(conn, admission_id)
        _require_epoch(conn, epoch)
        if adm.status == "started" and adm.owner_epoch == int(epoch):
            return adm  # a replay of this same start
        if adm.status != "queued":
            raise LedgerStateError(f"Admission {admission_id} is {adm.status}, not queued")
        ahead = conn.execute(
            "SELECT admission_id, status FROM session_admissions WHERE session_id = ?"
            " AND (status IN ('started', 'unknown') OR (status = 'queued' AND seq < ?))"
            " ORDER BY seq LIMIT 1",
            (adm.session_id, adm.seq),
        ).fetchone()
        if ahead is not None:
            raise LedgerStateError(
                f"Admission {admission_id} must wait: {ahead[0]} ({ahead[1]}) is ahead of it"
            )
        conn.execute(
            "UPDATE session_admissions SET status = 'started', owner_epoch = ?, updated_at = ?"
            " WHERE admission_id = ?",
            (int(epoch), time.time(), admission_id),
        )
        return _load_admission(conn, admission_id)

    return store.write(fn)


def _to_terminal(
    store: Store, admission_id: str, outcome: str, from_status: tuple[str, ...]
) -> Admission:
    _check_outcome(outcome)

    def fn(conn: sqlite3.Connection) -> Admission:
        adm = _load_admission(conn, admission_id)
        if adm.status == "terminal" and adm.outcome == outcome:
            return adm  # a replay of this same transition
        if adm.status not in from_status:
            raise LedgerStateError(
                f"Admission {admission_id} is {adm.status}"
                + (f" ({adm.outcome})" if adm.outcome else "")
                + f", not {' or '.join(from_status)}"
            )
        conn.execute(
            "UPDATE session_admissions SET status = 'terminal', outcome = ?, updated_at = ?"
            " WHERE admission_id = ?",
            (outcome, time.time(), admission_id),
        )
        return _load_admission(conn, admission_id)

    return store.write(fn)


def finish(store: Store, admission_id: str, outcome: str) -> Admission:
    """Move a started admission to terminal with its outcome."""
    return _to_terminal(store, admission_id, outcome, ("started",))


def resolve_unknown(store: Store, admission_id: str, outcome: str) -> Admission:
    """Settle an unknown admission with an outcome (the prompt.resolve_unknown operation)."""
    return _to_terminal(store, admission_id, outcome, ("unknown",))


def cancel_admission(store: Store, admission_id: str) -> Admission:
    """Withdraw a queued admission before it starts (terminal, outcome 'cancelled')."""
    return _to_terminal(store, admission_id, "cancelled", ("queued",))


# --- worker executions and receipts ---------------------------------------------------------


def get_execution(store: Store, execution_id: str) -> Execution:
    """Return one execution, or raise LedgerNotFoundError."""
    return _load_execution(store.conn, execution_id)


def register_execution(
    store: Store, execution_id: str, session_id: str, kind: str, epoch: int
) -> Execution:
    """Register a worker execution for a session under the current epoch (idempotent)."""
    _check_text("execution_id", execution_id)
    if kind not in EXECUTION_KINDS:
        raise ValueError(f"kind must be one of {', '.join(sorted(EXECUTION_KINDS))}, not {kind!r}")

    def fn(conn: sqlite3.Connection) -> Execution:
        _require_epoch(conn, epoch)
        require_session_in(conn, session_id)
        row = conn.execute(
            f"SELECT {_EXECUTION_COLS} FROM worker_executions WHERE execution_id = ?",
            (execution_id,),
        ).fetchone()
        if row is not None:
            existing = _execution(row)
            if existing.session_id != session_id or existing.kind != kind:
                raise ExecutionConflictError(
                    f"Execution {execution_id} is already registered as a {existing.kind} "
                    f"execution of session {existing.session_id}"
                )
            return existing
        now = time.time()
        conn.execute(
            "INSERT INTO worker_executions (execution_id, session_id, kind, owner_epoch, status,"
            " last_sequence, created_at, updated_at) VALUES (?, ?, ?, ?, 'registered', 0, ?, ?)",
            (execution_id, session_id, kind, int(epoch), now, now),
        )
        return _load_execution(conn, execution_id)

    return store.write(fn)


def mark_running(store: Store, execution_id: str, epoch: int) -> Execution:
    """Move a registered execution to running under the given (current) epoch."""

    def fn(conn: sqlite3.Connection) -> Execution:
        ex = _load_execution(conn, execution_id)
        _require_epoch(conn, epoch)
        if ex.status == "running" and ex.owner_epoch == int(epoch):
            return ex
        if ex.status != "registered":
            raise LedgerStateError(f"Execution {execution_id} is {ex.status}, not registered")
        conn.execute(
            "UPDATE worker_executions SET status = 'running', owner_epoch = ?, updated_at = ?"
            " WHERE execution_id = ?",
            (int(epoch), time.time(), execution_id),
        )
        return _load_execution(conn, execution_id)

    return store.write(fn)


def record_receipt(
    store: Store, execution_id: str, sequence: int, payload: Mapping[str, Any]
) -> Receipt:
    """Record a worker's next result (sequence = last + 1); a replay returns the stored one."""
    text = canonical_json(payload)
    if len(text.encode("utf-8")) > MAX_RECEIPT_BYTES:
        raise ValueError(f"receipt payload is larger than {MAX_RECEIPT_BYTES} bytes")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    sequence = int(sequence)

    def fn(conn: sqlite3.Connection) -> Receipt:
        ex = _load_execution(conn, execution_id)
        row = conn.execute(
            "SELECT execution_id, sequence, payload_digest, result_json, created_at"
            " FROM worker_receipts WHERE execution_id = ? AND sequence = ?",
            (execution_id, sequence),
        ).fetchone()
        if row is not None:
            stored = _receipt(row)
            if stored.payload_digest != digest:
                raise ReceiptConflictError(
                    f"Receipt {sequence} of execution {execution_id} was already recorded "
                    "with a different payload"
                )
            return stored
        expected = ex.last_sequence + 1
        if sequence != expected:
            raise ReceiptSequenceError(
                f"Receipt {sequence} of execution {execution_id} is out of order "
                f"(expected {expected})"
            )
        if ex.status != "running":
            raise LedgerStateError(f"Execution {execution_id} is {ex.status}, not running")
        now = time.time()
        conn.execute(
            "INSERT INTO worker_receipts (execution_id, sequence, payload_digest, result_json,"
            " created_at) VALUES (?, ?, ?, ?, ?)",
            (execution_id, sequence, digest, text, now),
        )
        conn.execute(
            "UPDATE worker_executions SET last_sequence = ?, updated_at = ? WHERE execution_id = ?",
            (sequence, now, execution_id),
        )
        return Receipt(execution_id, sequence, digest, text, now)

    return store.write(fn)


def list_receipts(store: Store, execution_id: str) -> list[Receipt]:
    """Return an execution's receipts in sequence order."""
    rows = store.conn.execute(
        "SELECT execution_id, sequence, payload_digest, result_json, created_at"
        " FROM worker_receipts WHERE execution_id = ? ORDER BY sequence",
        (execution_id,),
    ).fetchall()
    return [_receipt(r) for r in rows]


def finish_execution(store: Store, execution_id: str) -> Execution:
    """Move an execution (registered, running or unknown) to terminal."""

    def fn(conn: sqlite3.Connection) -> Execution:
        ex = _load_execution(conn, execution_id)
        if ex.status == "terminal":
            return ex
        conn.execute(
            "UPDATE worker_executions SET status = 'terminal', updated_at = ?"
            " WHERE execution_id = ?",
            (time.time(), execution_id),
        )
        return _load_execution(conn, execution_id)

    return store.write(fn)


# --- what deleting a session must respect ----------------------------------------------------


def _has_ledger(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'"
        " AND name IN ('session_admissions', 'worker_executions')"
    ).fetchone()
    return int(row[0]) == 2


def open_work_in(conn: sqlite3.Connection, session_ids: Iterable[str]) -> list[OpenWork]:
    """Return the ledger rows of these sessions that are not terminal (they pin the session)."""
    if not _has_ledger(conn):
        return []
    out: list[OpenWork] = []
    for batch in chunks(session_ids):
        qs = marks(len(batch))
        rows = conn.execute(
            "SELECT 'admission', admission_id, session_id, status, seq FROM session_admissions"
            f" WHERE session_id IN ({qs}) AND status <> 'terminal'"
            " UNION ALL SELECT 'execution', execution_id, session_id, status, 0"
            f" FROM worker_executions WHERE session_id IN ({qs}) AND status <> 'terminal'"
            " ORDER BY 1, 5, 2",
            [*batch, *batch],
        ).fetchall()
        out.extend(OpenWork(r[0], r[1], r[2], r[3]) for r in rows)
    return out


def delete_terminal_in(conn: sqlite3.Connection, session_ids: Iterable[str]) -> int:
    """Delete the terminal ledger rows (and their receipts) of these sessions; return rows."""
    if not _has_ledger(conn):
        return 0
    removed = 0
    for batch in chunks(session_ids):
        qs = marks(len(batch))
        removed += conn.execute(
            "DELETE FROM worker_receipts WHERE execution_id IN (SELECT execution_id FROM"
            f" worker_executions WHERE session_id IN ({qs}) AND status = 'terminal')",
            batch,
        ).rowcount
        removed += conn.execute(
            f"DELETE FROM worker_executions WHERE session_id IN ({qs}) AND status = 'terminal'",
            batch,
        ).rowcount
        removed += conn.execute(
            f"DELETE FROM session_admissions WHERE session_id IN ({qs}) AND status = 'terminal'",
            batch,
        ).rowcount
    return removed


def busy_message(session_id: str, rows: Iterable[OpenWork]) -> str:
    """Say which open rows pin a session, e.g. "session abc has open runtime work: …"."""
    return f"session {session_id} has open runtime work: " + ", ".join(r.describe() for r in rows)
