"""The agent's filter vocabulary for bulk prune, archive and their previews.

Each filter is a keyword (``title_like="smoke"``, ``max_tokens=200`` …) that becomes one SQL
condition over ``sessions s``; they all apply together. ``*_like`` filters match a substring
without regard to case, the others exactly (``provider`` ignores case too). Cost means the billed
cost, or the estimate where nothing was billed. An unknown keyword is a TypeError, so a typo never
widens a delete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hermes_state.shapes.text import bindable
from hermes_state.store.sql import escape_like

Clause = tuple[list[str], list[Any]]

# A session's last activity: its activity stamp, its newest message, or its start.
LAST_ACTIVE_SQL = (
    "MAX(COALESCE(s.last_activity_at, s.started_at), COALESCE((SELECT MAX(m.timestamp) "
    "FROM messages m WHERE m.session_id = s.id), s.started_at))"
)
_TOKENS_SQL = "(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0))"
_COST_SQL = "COALESCE(s.actual_cost_usd, s.estimated_cost_usd, 0)"


def _one(sql: str, convert: Callable[[Any], Any] = bindable) -> Callable[[Any], Clause]:
    return lambda value: ([sql], [convert(value)])


def _like(value: Any) -> str:
    return f"%{escape_like(str(bindable(value)).lower())}%"


def _cwd(value: Any) -> Clause:
    prefix = str(bindable(value)).rstrip("/\\") or str(value)
    esc = escape_like(prefix)
    return (
        ["(s.cwd = ? OR s.cwd LIKE ? ESCAPE '\\' OR s.cwd LIKE ? ESCAPE '\\')"],
        [prefix, esc + "/%", esc + "\\\\%"],
    )


# name -> (applies when: "set" = not None, "truthy" = a non-empty value; clause builder)
FILTERS: dict[str, tuple[str, Callable[[Any], Clause]]] = {
    "last_active_before": ("set", _one(f"{LAST_ACTIVE_SQL} < ?", float)),
    "last_active_after": ("set", _one(f"{LAST_ACTIVE_SQL} >= ?", float)),
    "started_before": ("set", _one("s.started_at < ?", float)),
    "started_after": ("set", _one("s.started_at >= ?", float)),
    "source": ("truthy", _one("s.source = ?")),
    "title_like": ("truthy", _one("LOWER(COALESCE(s.title, '')) LIKE ? ESCAPE '\\'", _like)),
    "end_reason": ("truthy", _one("s.end_reason = ?")),
    "cwd_prefix": ("truthy", _cwd),
    "min_messages": ("set", _one("COALESCE(s.message_count, 0) >= ?", int)),
    "max_messages": ("set", _one("COALESCE(s.message_count, 0) <= ?", int)),
    "model_like": ("truthy", _one("LOWER(COALESCE(s.model, '')) LIKE ? ESCAPE '\\'", _like)),
    "provider": (
        "truthy",
        _one("LOWER(COALESCE(s.billing_provider, '')) = ?", lambda v: str(bindable(v)).lower()),
    ),
    "user_id": ("truthy", _one("s.user_id = ?")),
    "chat_id": ("truthy", _one("s.chat_id = ?")),
    "chat_type": ("truthy", _one("s.chat_type = ?")),
    "branch_like": ("truthy", _one("LOWER(COALESCE(s.git_branch, '')) LIKE ? ESCAPE '\\'", _like)),
    "min_tokens": ("set", _one(f"{_TOKENS_SQL} >= ?", int)),
    "max_tokens": ("set", _one(f"{_TOKENS_SQL} <= ?", int)),
    "min_cost": ("set", _one(f"{_COST_SQL} >= ?", float)),
    "max_cost": ("set", _one(f"{_COST_SQL} <= ?", float)),
    "min_tool_calls": ("set", _one("COALESCE(s.tool_call_count, 0) >= ?", int)),
    "max_tool_calls": ("set", _one("COALESCE(s.tool_call_count, 0) <= ?", int)),
}
# Keywords that shape the selection rather than filter a column.
OPTIONS = frozenset({"archived", "include_pinned"})
NAMES = frozenset(FILTERS) | OPTIONS


def check(filters: Mapping[str, Any]) -> None:
    """Refuse a filter keyword this vocabulary does not have (TypeError, as for a bad argument)."""
    unknown = set(filters) - NAMES
    if unknown:
        raise TypeError(f"unexpected prune filter {min(unknown)!r}")


def filter_sql(filters: Mapping[str, Any]) -> Clause:
    """Return the conditions (alias ``s``) and parameters of the given filters.

    ``archived`` is three-way: True keeps archived sessions only, False unarchived ones only,
    None (absent) both. Pinned sessions are for the caller to spare (``include_pinned``).
    """
    check(filters)
    clauses: list[str] = []
    params: list[Any] = []
    for name, (applies, build) in FILTERS.items():
        value = filters.get(name)
        if value is None or (applies == "truthy" and not value):
            continue
        more, values = build(value)
        clauses += more
        params += values
    archived = filters.get("archived")
    if isinstance(archived, bool):
        clauses.append(f"COALESCE(s.archived, 0) = {int(archived)}")
    return clauses, params
