"""Token and cost accounting in the agent's calling conventions: per-call deltas or running
totals, queued counts flushed in one transaction, auxiliary (non-chat) usage, store totals."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_state.records.sessions import require_session_in
from hermes_state.shapes import model_config
from hermes_state.shapes.text import bindable
from hermes_state.store import schema
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError
from hermes_state.store.sql import marks

USAGE_COUNTERS = schema.USAGE_COUNTERS
_TOKENS = USAGE_COUNTERS[1:]


@dataclass(frozen=True)
class _Call:
    """One usage report: counters, cost, and the route (model and billing) it went through."""

    counts: dict[str, int]
    estimated: float | None
    actual: float | None
    model: str | None
    provider: str | None
    base_url: str | None
    mode: str | None
    cost_status: str | None = None
    cost_source: str | None = None
    pricing_version: str | None = None
    task: str = ""

    @property
    def has_usage(self) -> bool:
        """Tell whether the report counts anything (tokens, calls or an estimate)."""
        return any(self.counts.values()) or bool(self.estimated)

    @property
    def accounted(self) -> bool:
        """Tell whether the report carries usage or a billed cost (else: metadata only)."""
        return self.has_usage or bool(self.actual)


def _ensure_row(conn: sqlite3.Connection, session_id: str, source: str, model: str | None) -> None:
    """Create a missing session row (the agent reports usage before a failed create is retried)."""
    conn.execute(
        "INSERT OR IGNORE INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
        (session_id, source, model, time.time()),
    )


def _add_to_session(
    conn: sqlite3.Connection, session_id: str, call: _Call, *, absolute: bool
) -> None:
    """Add a report to the session's totals (or set them, ``absolute``); fill what is unset.

    An unknown cost stays unknown: a report without one leaves the stored figure as it is.
    Route and model only fill empty columns, and only from a report that accounted something.
    """
    cols = set(schema.live_columns(conn, "sessions"))
    counters = [c for c in USAGE_COUNTERS if c in cols]
    if absolute:
        sets = [f"{c} = ?" for c in counters]
        cost = "CASE WHEN ? IS NULL THEN {c} ELSE ? END"
    else:
        sets = [f"{c} = COALESCE({c}, 0) + ?" for c in counters]
        cost = "CASE WHEN ? IS NULL THEN {c} ELSE COALESCE({c}, 0) + ? END"
    params: list[Any] = [call.counts[c] for c in counters]
    for column, amount in (
        ("estimated_cost_usd", call.estimated),
        ("actual_cost_usd", call.actual),
    ):
        sets.append(f"{column} = {cost.format(c=column)}")
        params += [amount, amount]
    for column, value in (
        ("cost_status", call.cost_status),
        ("cost_source", call.cost_source),
        ("pricing_version", call.pricing_version),
    ):
        if column in cols:
            sets.append(f"{column} = COALESCE(?, {column})")
            params.append(value)
    fill = call.accounted and not call.task
    for column, value in (
        ("billing_provider", call.provider),
        ("billing_base_url", call.base_url),
        ("billing_mode", call.mode),
        ("model", call.model),
    ):
        if column in cols:
            sets.append(f"{column} = COALESCE({column}, ?)")
            params.append(value if fill else None)
    conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*params, session_id])


def _add_usage_row(conn: sqlite3.Connection, session_id: str, call: _Call, *, at: float) -> None:
    """Add a report to its per-route usage row, keyed by the route as the call reported it.

    A main-loop call that does not name its route is the session's (its model, its billing);
    an auxiliary call (``task`` set) never borrows the main loop's route.
    """
    if not schema.live_columns(conn, "session_model_usage"):
        return  # stores of releases before per-model accounting
    session: dict[str, Any] = {}
    if not call.task:
        row = conn.execute(
            "SELECT model, billing_provider, billing_base_url, billing_mode FROM sessions "
            "WHERE id = ?",
            (session_id,),
        ).fetchone()
        session = dict(row) if row is not None else {}
    key = (
        session_id,
        call.model or session.get("model") or "unknown",
        call.provider or session.get("billing_provider") or "",
        call.base_url or session.get("billing_base_url") or "",
        call.mode or session.get("billing_mode") or "",
        call.task or "",
    )
    cols = set(schema.live_columns(conn, "session_model_usage"))
    with_task = "task" in cols
    key_cols = ["session_id", "model", "billing_provider", "billing_base_url", "billing_mode"]
    if with_task:
        key_cols.append("task")
    adds = ", ".join(f"{c} = {c} + excluded.{c}" for c in USAGE_COUNTERS)
    conn.execute(
        f"INSERT INTO session_model_usage ({', '.join(key_cols)}, {', '.join(USAGE_COUNTERS)}, "
        "estimated_cost_usd, actual_cost_usd, cost_status, cost_source, first_seen, last_seen) "
        f"VALUES ({marks(len(key_cols) + len(USAGE_COUNTERS) + 6)}) "
        f"ON CONFLICT({', '.join(key_cols)}) DO UPDATE SET {adds}, "
        "estimated_cost_usd = estimated_cost_usd + excluded.estimated_cost_usd, "
        "actual_cost_usd = actual_cost_usd + excluded.actual_cost_usd, "
        "cost_status = COALESCE(excluded.cost_status, cost_status), "
        "cost_source = COALESCE(excluded.cost_source, cost_source), "
        "last_seen = excluded.last_seen",
        [
            *key[: len(key_cols)],
            *(call.counts[c] for c in USAGE_COUNTERS),
            float(call.estimated or 0.0),
            float(call.actual or 0.0),
            call.cost_status,
            call.cost_source,
            at,
            at,
        ],
    )


def _take_first_route(conn: sqlite3.Connection, session_id: str, call: _Call) -> None:
    """Let the first accounted call of a session decide its route.

    create_session records the route the agent asked for; when that provider failed and a
    fallback answered, the first call that counts is the route the session really used, so its
    model and billing replace the requested ones, all four together. Later calls leave them.
    """
    if call.task or not call.accounted or not call.model or not call.provider:
        return
    row = conn.execute(
        "SELECT model, billing_provider, api_call_count FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None or int(row["api_call_count"] or 0) != 0:
        return
    if row["model"] == call.model and row["billing_provider"] == call.provider:
        return
    conn.execute(
        "UPDATE sessions SET model = ?, billing_provider = ?, billing_base_url = ?, "
        "billing_mode = ? WHERE id = ?",
        (call.model, call.provider, call.base_url, call.mode, session_id),
    )


def _call(
    counts: Mapping[str, Any],
    *,
    estimated: float | None,
    actual: float | None,
    model: str | None,
    provider: str | None = None,
    base_url: str | None = None,
    mode: str | None = None,
    cost_status: str | None = None,
    cost_source: str | None = None,
    pricing_version: str | None = None,
    task: str = "",
) -> _Call:
    return _Call(
        counts={c: int(counts.get(c) or 0) for c in USAGE_COUNTERS},
        estimated=None if estimated is None else float(estimated),
        actual=None if actual is None else float(actual),
        model=bindable(model) or None,
        provider=bindable(provider) or None,
        base_url=bindable(base_url) or None,
        mode=bindable(mode) or None,
        cost_status=cost_status,
        cost_source=cost_source,
        pricing_version=pricing_version,
        task=bindable(task) or "",
    )


def update_token_counts(
    store: Store,
    session_id: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
    model: str | None = None,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    estimated_cost_usd: float | None = None,
    actual_cost_usd: float | None = None,
    cost_status: str | None = None,
    cost_source: str | None = None,
    pricing_version: str | None = None,
    billing_provider: str | None = None,
    billing_base_url: str | None = None,
    billing_mode: str | None = None,
    api_call_count: int = 0,
    absolute: bool = False,
    source: str | None = None,
    task: str = "",
) -> None:
    """Add one call's tokens and cost to a session (or, with absolute=True, set its totals).

    The agent's two conventions: the CLI passes per-call deltas, which also land in the
    per-route usage row of the route the call went through (``session_model_usage``); the
    gateway passes cumulative totals (``absolute``), which set the session's counters and add no
    usage row (the deltas of those calls were recorded when they happened). A session that does
    not exist yet is created with ``source`` (default "unknown"), as the agent does. ``task``
    names a per-turn route (e.g. voice chat): it counts in the totals and has its own usage row,
    but never becomes the session's route.
    """
    call = _call(
        {
            "api_call_count": api_call_count,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "reasoning_tokens": reasoning_tokens,
        },
        estimated=estimated_cost_usd,
        actual=actual_cost_usd,
        model=model,
        provider=billing_provider,
        base_url=billing_base_url,
        mode=billing_mode,
        cost_status=cost_status,
        cost_source=cost_source,
        pricing_version=pricing_version,
        task=task,
    )
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> None:
        _ensure_row(conn, sid, bindable(source) or "unknown", call.model)
        _take_first_route(conn, sid, call)
        _add_to_session(conn, sid, call, absolute=absolute)
        if not absolute and call.has_usage:
            _add_usage_row(conn, sid, call, at=time.time())

    store.write(fn)


def record_usage(
    store: Store,
    session_id: str,
    model: str,
    *,
    task: str = "",
    billing_provider: str = "",
    billing_base_url: str = "",
    billing_mode: str = "",
    estimated_cost_usd: float = 0.0,
    actual_cost_usd: float | None = None,
    at: float | None = None,
    **counters: int,
) -> None:
    """Add one API call's token counts and cost to the session and its per-route usage row."""
    unknown = set(counters) - set(USAGE_COUNTERS)
    if unknown:
        raise TypeError(f"record_usage() got unexpected counters: {', '.join(sorted(unknown))}")
    counts = dict(counters)
    counts.setdefault("api_call_count", 1)  # one call unless the caller says how many
    call = _call(
        counts,
        estimated=estimated_cost_usd,
        actual=actual_cost_usd,
        model=model,
        provider=billing_provider,
        base_url=billing_base_url,
        mode=billing_mode,
        task=task,
    )
    when = time.time() if at is None else float(at)

    def fn(conn: sqlite3.Connection) -> None:
        require_session_in(conn, bindable(session_id))
        _add_to_session(conn, bindable(session_id), call, absolute=False)
        _add_usage_row(conn, bindable(session_id), call, at=when)

    store.write(fn)


@dataclass
class TokenQueue:
    """Token counts queued in memory by the agent's hot path, written by flush()."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, session_id: str, counts: Mapping[str, Any]) -> None:
        """Queue one update_token_counts call."""
        with self.lock:
            self.items.append((session_id, dict(counts)))

    def flush(self, store: Store) -> bool:
        """Apply every queued update in order; return False if one failed (it stays queued)."""
        with self.lock:
            pending, self.items = self.items, []
        for i, (session_id, counts) in enumerate(pending):
            try:
                update_token_counts(store, session_id, **counts)
            except (SessionNotFoundError, OSError, RuntimeError):
                with self.lock:
                    self.items[:0] = pending[i:]
                return False
        return True


def record_auxiliary_usage(
    store: Store,
    session_id: str,
    task: str,
    *,
    model: str | None = None,
    billing_provider: str | None = None,
    billing_base_url: str | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    estimated_cost_usd: float | None = None,
    api_call_count: int = 1,
) -> None:
    """Record a side task's usage (title generation, compression, …) in its own usage row.

    The session's totals are left alone, as the agent leaves them: the gateway sets those to the
    main loop's cumulative figures, which would overwrite anything added here. Nothing is
    recorded without a session id or a task name.
    """
    if not session_id or not task:
        return
    call = _call(
        {
            "api_call_count": 1 if api_call_count is None else api_call_count,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "reasoning_tokens": reasoning_tokens,
        },
        estimated=estimated_cost_usd,
        actual=None,
        model=model,
        provider=billing_provider,
        base_url=billing_base_url,
        task=task,
    )
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> None:
        _ensure_row(conn, sid, "unknown", None)
        _add_usage_row(conn, sid, call, at=time.time())

    store.write(fn)


def update_session_model(
    store: Store,
    session_id: str,
    model: str,
    provider: str | None = None,
    *,
    base_url: str | None = None,
    api_mode: str | None = None,
) -> None:
    """Set a session's model after a mid-session switch (token reports only fill an empty one).

    With ``provider`` the whole route the agent resumes with is replaced in ``model_config``
    (top-level keys and ``gateway_runtime``), so the old provider's endpoint cannot survive the
    switch; the browser's per-model lock is dropped either way.
    """
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (sid,)).fetchone()
        if row is None:
            return
        config = model_config.parse(row[0])
        config.pop("browser_model_lock", None)
        if provider:
            route = {"provider": provider, "base_url": base_url or None}
            route["api_mode"] = api_mode or None
            config.update(route, gateway_runtime=route)
        conn.execute(
            "UPDATE sessions SET model = COALESCE(?, model), model_config = ? WHERE id = ?",
            (bindable(model) or None, model_config.dump(config) if config else row[0], sid),
        )

    store.write(fn)


def update_session_billing_route(
    store: Store,
    session_id: str,
    *,
    provider: str,
    base_url: str,
    billing_mode: str | None = None,
) -> None:
    """Set a session's billing route after a provider switch (the mode only when given)."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET billing_provider = ?, billing_base_url = ?, "
            "billing_mode = COALESCE(?, billing_mode) WHERE id = ?",
            (bindable(provider), bindable(base_url), bindable(billing_mode), bindable(session_id)),
        )
    )


def usage_totals(
    store: Store, *, min_message_count: int = 1, include_archived: bool = False
) -> dict[str, float]:
    """Return tokens and spend over root sessions: {"tokens": …, "cost_usd": …}.

    Spend prefers the billed figure over the estimate; compression continuations carry their
    own counts, so only roots (no parent) are summed, as the agent's sidebar does.
    """
    where = ["parent_session_id IS NULL", "COALESCE(message_count, 0) >= ?"]
    params: list[Any] = [min_message_count]
    if not include_archived and "archived" in store.columns("sessions"):
        where.append("COALESCE(archived, 0) = 0")
    row = store.conn.execute(
        "SELECT COALESCE(SUM(COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0)), 0),"
        " COALESCE(SUM(COALESCE(actual_cost_usd, estimated_cost_usd, 0)), 0)"
        f" FROM sessions WHERE {' AND '.join(where)}",
        params,
    ).fetchone()
    return {"tokens": int(row[0] or 0), "cost_usd": float(row[1] or 0.0)}
