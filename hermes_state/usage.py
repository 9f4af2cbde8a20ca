"""Token and cost accounting in the agent's calling conventions: per-call deltas or running
totals, queued counts flushed in one transaction, auxiliary (non-chat) usage, store totals."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_state.connection import Store
from hermes_state.errors import SessionNotFoundError
from hermes_state.sessions import USAGE_COUNTERS, record_usage

_COST_FIELDS = ("cost_status", "cost_source", "pricing_version")
_ROUTE_FIELDS = ("billing_provider", "billing_base_url", "billing_mode")


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

    The agent's two conventions: the CLI passes per-call deltas, the gateway passes cumulative
    totals (``absolute``). A session that does not exist yet is created with ``source``
    (default "unknown"), as the agent does. With ``absolute``, the per-model usage row receives
    the difference between the new totals and the session's current ones.
    """
    from hermes_state.sessions import create_session, get_session

    if get_session(store, session_id) is None:
        create_session(store, session_id, source or "unknown", model=model)
    counts = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens,
        "reasoning_tokens": reasoning_tokens,
        "api_call_count": api_call_count,
    }
    estimated, actual = estimated_cost_usd, actual_cost_usd
    if absolute:
        current = get_session(store, session_id) or {}
        counts = {k: max(0, int(v or 0) - int(current.get(k) or 0)) for k, v in counts.items()}
        if estimated is not None:
            estimated = max(0.0, estimated - float(current.get("estimated_cost_usd") or 0.0))
        if actual is not None:
            actual = max(0.0, actual - float(current.get("actual_cost_usd") or 0.0))
    if not any(counts.values()) and not estimated and not actual:
        return
    route = {
        "billing_provider": billing_provider or "",
        "billing_base_url": billing_base_url or "",
        "billing_mode": billing_mode or "",
    }
    record_usage(
        store,
        session_id,
        model or "unknown",
        task=task,
        billing_provider=route["billing_provider"],
        billing_base_url=route["billing_base_url"],
        billing_mode=route["billing_mode"],
        estimated_cost_usd=estimated or 0.0,
        actual_cost_usd=actual,
        **{k: int(v) for k, v in counts.items() if k in USAGE_COUNTERS},
    )
    extra = {
        "cost_status": cost_status,
        "cost_source": cost_source,
        "pricing_version": pricing_version,
        **{k: v for k, v in route.items() if v},
    }
    extra = {k: v for k, v in extra.items() if v is not None}
    if extra and set(extra) <= set(store.columns("sessions")):
        sets = ", ".join(f"{k} = ?" for k in extra)
        store.write(
            lambda conn: conn.execute(
                f"UPDATE sessions SET {sets} WHERE id = ?", [*extra.values(), session_id]
            )
        )


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
    """Record a side task's usage (title generation, compression, …) under its task name."""
    if not task:
        raise ValueError("task must name the auxiliary task (e.g. 'title', 'compression')")
    update_token_counts(
        store,
        session_id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=model,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
        reasoning_tokens=reasoning_tokens,
        estimated_cost_usd=estimated_cost_usd,
        billing_provider=billing_provider,
        billing_base_url=billing_base_url,
        api_call_count=api_call_count,
        task=task,
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
