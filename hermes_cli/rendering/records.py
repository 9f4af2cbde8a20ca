"""The JSON vocabulary of the command line: one shape per kind of thing, the same in every command.

Rules (documented in hermes(1), checked by tests against what the commands emit):
- a time is a string, ISO-8601 in UTC to the second (`2026-11-18T09:15:02Z`), and its key ends in
  `_at`; a missing time is null;
- a flag is a JSON boolean (`archived`, `pinned`, `active`, `compacted`);
- the same thing has the same key everywhere: a session is `id` in a session object and
  `session_id` elsewhere; counts are `session_count`, `message_count` (live messages: the
  current conversation) and `stored_message_count` (every stored row, all generations: what an
  export writes and a delete removes); money is `cost_usd`
  (the actual cost when known, else the estimate); token totals are `total_tokens`.
Exact stored values (epoch floats, every column) are what `sessions export` writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

SESSION_KEYS = (
    "id",
    "title",
    "preview",
    "source",
    "model",
    "profile",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "last_active_at",
    "message_count",
    "stored_message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "archived",
    "pinned",
)

MESSAGE_KEYS = (
    "id",
    "session_id",
    "role",
    "content",
    "reasoning",
    "tool_name",
    "tool_calls",
    "tool_call_id",
    "created_at",
    "token_count",
    "finish_reason",
    "active",
    "compacted",
    "message_uid",
)

HIT_KEYS = (
    "id",
    "session_id",
    "session_title",
    "role",
    "snippet",
    "tool_name",
    "created_at",
    "source",
    "model",
    "session_started_at",
    "context",
    "vault",
)

# `sessions search --json`: "title_matches", the sessions whose title matches the query.
TITLE_HIT_KEYS = (
    "session_id",
    "session_title",
    "source",
    "model",
    "session_started_at",
    "last_active_at",
)

SOURCE_KEYS = ("source", "session_count", "message_count", "stored_message_count")
MODEL_KEYS = ("model", "session_count", "input_tokens", "output_tokens", "cost_usd")
TOP_SESSION_KEYS = ("id", "title", "model", "source", "total_tokens", "cost_usd")
STATS_KEYS = (
    "profile",
    "session_count",
    "message_count",
    "stored_message_count",
    "by_source",
    "by_model",
    "top_sessions",
    "store",
    "vault",
)
STORE_KEYS = (
    "path",
    "schema_version",
    "files",
    "total_bytes",
    "page_size",
    "page_count",
    "freelist_count",
    "journal_mode",
    "tables",
)
# `stats --format jsonl|csv|tsv`: the report as one row per figure (tidy, long form).
STATS_ROW_KEYS = ("profile", "section", "item", "metric", "value")
PROFILE_KEYS = (
    "name",
    "path",
    "active",
    "has_store",
    "store_bytes",
    "vault_bytes",
    "backup_bytes",
    "total_bytes",
)
CHECK_KEYS = ("name", "ok", "detail", "warning")
LOCK_ROW_KEYS = ("pid", "command", "file", "lock", "access", "mechanism")
ERROR_KEYS = ("profile", "error", "message")
# `hermes usage --json`: the document; totals and every group carry USAGE_FIGURE_KEYS, a group
# first its key (day, week (its Monday), month, model, provider, task, source, or session_id
# with title, source and model). --format jsonl/csv/tsv: the groups.
USAGE_KEYS = (
    "profile",
    "by",
    "basis",
    "since_at",
    "until_at",
    "sources",
    "models",
    "totals",
    "vault",
    "groups",
)
USAGE_FIGURE_KEYS = (
    "session_count",
    "api_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "total_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_usd",
    "unknown_cost_count",
    "unknown_cost_tokens",
)
# `hermes watch --once --json`: one snapshot; --format jsonl/csv/tsv: WATCH_ROW_KEYS rows.
WATCH_KEYS = (
    "profile",
    "path",
    "taken_at",
    "store_ms",
    "problem",
    "files",
    "total_bytes",
    "schema_version",
    "journal_mode",
    "newest_message_id",
    "messages_per_minute",
    "active_session_count",
    "active_sessions",
    "locks",
    "ledger",
    "gateways",
)
WATCH_ROW_KEYS = ("taken_at", "section", "item", "metric", "value")


def pick(
    rows: Iterable[Mapping[str, Any]], keys: Sequence[str], fields: Sequence[str] | None
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Return the rows keeping only fields (in that order) and the keys they now have.

    ``fields`` None keeps every key. An unknown field raises ValueError naming the known ones.
    """
    if not fields:
        return [dict(r) for r in rows], tuple(keys)
    unknown = [f for f in fields if f not in keys]
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; the fields are: {', '.join(keys)}")
    chosen = tuple(dict.fromkeys(fields))
    return [{k: r.get(k) for k in chosen} for r in rows], chosen


def iso_utc(ts: Any) -> str | None:
    """Return epoch seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC); text is kept; unusable values null."""
    if isinstance(ts, str):
        return ts  # stored as text by some foreign writer: shown as it is
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        return None
    try:
        return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def flag(value: Any) -> bool | None:
    """Return a stored 0/1 as a boolean (null stays null)."""
    return None if value is None else bool(value)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def cost(row: Mapping[str, Any]) -> float | None:
    """Return a session's cost: the actual one when known, else the estimate."""
    actual = row.get("actual_cost_usd")
    return actual if actual is not None else row.get("estimated_cost_usd")


def session(row: Mapping[str, Any], profile: str | None = None) -> dict[str, Any]:
    """Return a session row (as listed or stored) in the documented shape."""
    last = row.get("last_active")
    if last is None:
        last = row.get("last_activity_at") or row.get("started_at")
    return {
        "id": row.get("id"),
        "title": row.get("title"),
        "preview": row.get("preview"),
        "source": row.get("source"),
        "model": row.get("model"),
        "profile": row.get("profile") or profile,
        "parent_session_id": row.get("parent_session_id"),
        "started_at": iso_utc(row.get("started_at")),
        "ended_at": iso_utc(row.get("ended_at")),
        "end_reason": row.get("end_reason"),
        "last_active_at": iso_utc(last),
        "message_count": _int(row.get("message_count")),
        "stored_message_count": _int(row.get("stored_message_count", row.get("message_count"))),
        "tool_call_count": _int(row.get("tool_call_count")),
        "input_tokens": _int(row.get("input_tokens")),
        "output_tokens": _int(row.get("output_tokens")),
        "total_tokens": _int(row.get("input_tokens")) + _int(row.get("output_tokens")),
        "cost_usd": cost(row),
        "archived": bool(row.get("archived")),
        "pinned": bool(row.get("pinned")),
    }


def reasoning_text(msg: Mapping[str, Any]) -> str | None:
    """Return a message's reasoning text (`reasoning`, else `reasoning_content`), or None."""
    for key in ("reasoning", "reasoning_content"):
        value = msg.get(key)
        if value:
            return value if isinstance(value, str) else str(value)
    return None


def message(msg: Mapping[str, Any], session_id: str | None = None) -> dict[str, Any]:
    """Return a message row in the documented shape."""
    return {
        "id": msg.get("id"),
        "session_id": msg.get("session_id") or session_id,
        "role": msg.get("role"),
        "content": msg.get("content"),
        "reasoning": reasoning_text(msg),
        "tool_name": msg.get("tool_name"),
        "tool_calls": msg.get("tool_calls"),
        "tool_call_id": msg.get("tool_call_id"),
        "created_at": iso_utc(msg.get("timestamp")),
        "token_count": msg.get("token_count"),
        "finish_reason": msg.get("finish_reason"),
        "active": bool(msg.get("active", 1)),
        "compacted": bool(msg.get("compacted", 0)),
        "message_uid": msg.get("message_uid"),
    }


def messages(rows: Iterable[Mapping[str, Any]], session_id: str) -> Iterator[dict[str, Any]]:
    """Yield message rows in the documented shape (lazily: transcripts can be huge)."""
    for row in rows:
        yield message(row, session_id)


def hit(row: Mapping[str, Any], title: str | None) -> dict[str, Any]:
    """Return a search hit in the documented shape."""
    return {
        "id": row.get("id"),
        "session_id": row.get("session_id"),
        "session_title": title,
        "role": row.get("role"),
        "snippet": row.get("snippet"),
        "tool_name": row.get("tool_name"),
        "created_at": iso_utc(row.get("timestamp")),
        "source": row.get("source"),
        "model": row.get("model"),
        "session_started_at": iso_utc(row.get("session_started")),
        "context": [
            {"role": c.get("role"), "content": c.get("content")}
            for c in (row.get("context") or [])
            if isinstance(c, Mapping)
        ],
        "vault": row.get("vault"),
    }


def title_hit(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return a session whose title matched a search, in the documented shape."""
    return {
        "session_id": row.get("id"),
        "session_title": row.get("title"),
        "source": row.get("source"),
        "model": row.get("model"),
        "session_started_at": iso_utc(row.get("started_at")),
        "last_active_at": iso_utc(row.get("last_active")),
    }


# A prune's result as the library gives it (epoch floats) -> the vocabulary: times ISO `_at`.
_PRUNE_TIMES = {
    "cutoff": "until_at",
    "active_after": "since_at",
    "started_after": "started_after_at",
}


def prune(result: Mapping[str, Any]) -> dict[str, Any]:
    """Return a prune's plan or result in the documented shape: times as ISO `_at` keys,
    `older_than_days` to the second (not 300.00000000008004), each detail's `last_active_at`."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key in _PRUNE_TIMES:
            out[_PRUNE_TIMES[key]] = iso_utc(value)
        elif key == "older_than_days" and isinstance(value, int | float):
            out[key] = round(float(value), 5)  # 1e-5 days is under a second
        elif key == "details":
            out[key] = [
                {
                    ("last_active_at" if k == "last_active" else k): _detail(k, v)
                    for k, v in d.items()
                }
                for d in value
            ]
        else:
            out[key] = value
    return out


def _detail(key: str, value: Any) -> Any:
    return iso_utc(value) if key == "last_active" else value


VAULT_STORE_KEYS = (
    "year",
    "path",
    "session_count",
    "message_count",
    "bytes",
    "first_started_at",
    "last_active_at",
    "hidden_session_count",
)


def vault_store(info: Mapping[str, Any]) -> dict[str, Any]:
    """Return one vault store of `vault list --json` in the documented shape."""
    return {
        "year": info.get("year"),
        "path": info.get("path"),
        "session_count": _int(info.get("sessions")),
        "message_count": _int(info.get("messages")),
        "bytes": _int(info.get("bytes")),
        "first_started_at": iso_utc(info.get("first_started")),
        "last_active_at": iso_utc(info.get("last_active")),
        "hidden_session_count": _int(info.get("hidden")),
        "resumed_session_count": _int(info.get("resumed")),
    }


def stats(report: Mapping[str, Any]) -> dict[str, Any]:
    """Return one profile's statistics in the documented shape."""
    store = report.get("store") or {}
    return {
        "profile": report.get("profile"),
        "session_count": _int(report.get("session_count")),
        "message_count": _int(report.get("message_count")),
        "stored_message_count": _int(report.get("stored_message_count")),
        "by_source": [
            {
                "source": r.get("source"),
                "session_count": _int(r.get("sessions")),
                "message_count": _int(r.get("messages")),
                "stored_message_count": _int(r.get("stored_messages")),
            }
            for r in report.get("by_source") or []
        ],
        "by_model": [{k: r.get(k) for k in MODEL_KEYS} for r in report.get("by_model") or []],
        "top_sessions": [
            {k: r.get(k) for k in TOP_SESSION_KEYS} for r in report.get("top_sessions") or []
        ],
        "store": {k: store.get(k) for k in STORE_KEYS},
        # What the vault holds (its sessions are in every figure above); null: not read.
        "vault": report.get("vault"),
    }


def lock_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a lock report's holders, then its lock-less openers, as LOCK_ROW_KEYS rows."""
    rows = [
        {
            "pid": h.get("pid"),
            "command": h.get("command"),
            "file": h.get("file"),
            "lock": h.get("kind"),
            "access": h.get("access"),
            "mechanism": h.get("mechanism"),
        }
        for h in report.get("holders") or []
    ]
    rows += [
        {k: o.get(k) for k in ("pid", "command", "file")}
        | {"lock": None, "access": None, "mechanism": None}
        for o in report.get("open_files") or []
    ]
    return rows


def stats_rows(report: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield a stats report (documented shape) as {profile, section, item, metric, value} rows."""
    profile = report["profile"]

    def row(section: str, item: Any, metric: str, value: Any) -> dict[str, Any]:
        return {
            "profile": profile,
            "section": section,
            "item": item,
            "metric": metric,
            "value": value,
        }

    yield row("totals", None, "session_count", report["session_count"])
    yield row("totals", None, "message_count", report["message_count"])
    yield row("totals", None, "stored_message_count", report["stored_message_count"])
    for section, key, metrics in (
        ("by_source", "source", SOURCE_KEYS[1:]),
        ("by_model", "model", MODEL_KEYS[1:]),
        ("top_sessions", "id", TOP_SESSION_KEYS[1:]),
    ):
        for entry in report[section]:
            for metric in metrics:
                yield row(section, entry[key], metric, entry[metric])
    store = report["store"]
    for metric in STORE_KEYS:
        if metric == "files":
            for name, size in (store.get("files") or {}).items():
                yield row("files", name, "bytes", size)
        elif metric == "tables":
            for name, count in (store.get("tables") or {}).items():
                yield row("tables", name, "row_count", count)
        else:
            yield row("store", None, metric, store.get(metric))
