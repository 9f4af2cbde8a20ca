"""Importing a list of exported sessions the way the agent's own ``import_sessions`` does.

The agent's form is all or nothing: every session of the list is checked first (shape, text
fields, JSON, the size limits below) and, if any is wrong, nothing is written and each problem
is reported with its index; otherwise the whole list is written in one transaction. Sessions
that already exist are skipped. A parent link is kept when the parent exists (in the store or in
the list) and the link closes no cycle; otherwise the child is imported without it ("detached").
What belongs to a live channel or process rather than to the conversation (gateway routing key,
handoff, rewind count, compression cooldown) is not carried over.

The CLI's ``sessions import`` (:mod:`hermes_state.transfer.portability`) streams files of any size a
session at a time instead; both write sessions through the same code.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S
from hermes_state.transfer import import_records, import_write
from hermes_state.transfer.import_ids import NO_OTHER_STORES, IdPlan, OtherStores
from hermes_state.transfer.import_target import Fitting, Target

MAX_SESSIONS = 500
MAX_MESSAGES_PER_SESSION = 10_000
MAX_TOTAL_MESSAGES = 50_000
MAX_SESSION_BYTES = 5 * 1024 * 1024
MAX_TOTAL_BYTES = 25 * 1024 * 1024

_SESSION_TEXT = (
    "parent_session_id",
    "source",
    "user_id",
    "model",
    "system_prompt",
    "end_reason",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
)
_MESSAGE_TEXT = (
    "tool_call_id",
    "tool_name",
    "effect_disposition",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "platform_message_id",
    "message_id",
)
# Live state of a channel or process, reset on import (the conversation is what is restored).
_RUNTIME_RESET = {
    "session_key": None,
    "handoff_state": None,
    "handoff_platform": None,
    "handoff_error": None,
    "rewind_count": 0,
    "compression_failure_cooldown_until": None,
    "compression_failure_error": None,
}


class _Bad(ValueError):
    """A session of the list that cannot be imported (the message says why)."""


class _Refused(Exception):
    """The store refused one session while the list was written (the write rolls back)."""

    def __init__(self, index: int, session_id: str, message: str) -> None:
        super().__init__(message)
        self.error = _error(index, session_id, message)


@dataclass(frozen=True)
class _Checked:
    index: int
    session: dict[str, Any]
    messages: list[dict[str, Any]]
    parent: str | None


def _text(record: Mapping[str, Any], field: str) -> None:
    value = record.get(field)
    if value is not None and not isinstance(value, str):
        raise _Bad(f"{field} must be a string")


def _json_object(record: dict[str, Any], field: str) -> None:
    value = record.get(field)
    if value is None:
        return
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise _Bad(f"{field} must be valid JSON") from None
        if not isinstance(parsed, dict):
            raise _Bad(f"{field} must be a JSON object")
    elif not isinstance(value, dict):
        raise _Bad(f"{field} must be a JSON object")


def _check_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise _Bad(f"messages[{i}].role must be a non-empty string")
        for field in _MESSAGE_TEXT:
            _text(message, field)
        count = message.get("token_count")
        if count is not None:
            try:
                int(count)
            except (TypeError, ValueError):
                raise _Bad("token_count must be an integer") from None
        clean = dict(message)
        if clean.get("message_id") and not clean.get("platform_message_id"):
            clean["platform_message_id"] = clean["message_id"]
        out.append({k: v for k, v in clean.items() if k in import_records.MESSAGE_KEYS})
    return out


def _check(index: int, raw: Any, seen: set[str], totals: list[int]) -> _Checked:
    """Check one session of the list; raise _Bad with the agent's wording when it is wrong."""
    if not isinstance(raw, dict):
        raise _Bad("session must be an object")
    sid = str(raw.get("id") or "").strip()
    if not sid:
        raise _Bad("session id is required")
    if sid in seen:
        raise _Bad("duplicate session id")
    messages = raw.get("messages") or []
    if not isinstance(messages, list):
        raise _Bad("messages must be a list")
    if len(messages) > MAX_MESSAGES_PER_SESSION:
        raise _Bad("messages exceeds the per-session import limit")
    if any(not isinstance(m, dict) for m in messages):
        raise _Bad("messages must contain only objects")
    try:
        size = len(json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        raise _Bad("session must be JSON serializable") from None
    if size > MAX_SESSION_BYTES:
        raise _Bad("session exceeds the import size limit")
    totals[0] += size
    if totals[0] > MAX_TOTAL_BYTES:
        raise _Bad("import exceeds the total size limit")
    session = dict(raw)
    session["id"] = sid
    _json_object(session, "model_config")
    for field in _SESSION_TEXT:
        _text(session, field)
    clean_messages = _check_messages(messages)
    totals[1] += len(clean_messages)
    if totals[1] > MAX_TOTAL_MESSAGES:
        raise _Bad("messages exceeds the total import limit")
    parent = (session.get("parent_session_id") or "").strip() or None
    session.update(_RUNTIME_RESET)
    session["parent_session_id"] = None  # linked after every session is in
    session["source"] = session.get("source") or "import"
    if not isinstance(session.get("started_at"), int | float) or isinstance(
        session.get("started_at"), bool
    ):
        session["started_at"] = time.time()
    session.pop("messages", None)
    return _Checked(index, session, clean_messages, parent)


def _error(index: int, session_id: str, message: str) -> dict[str, Any]:
    item: dict[str, Any] = {"index": index, "error": message}
    if session_id:
        item["session_id"] = session_id
    return item


def _closes_cycle(conn: sqlite3.Connection, child: str, parent: str, links: dict[str, str]) -> bool:
    """Tell whether linking child -> parent makes the parent chain loop (given the links)."""
    seen = {child}
    current: str | None = parent
    while current:
        if current in seen:
            return True
        seen.add(current)
        if current in links:
            current = links[current]
            continue
        row = conn.execute(
            "SELECT parent_session_id FROM sessions WHERE id = ?", (current,)
        ).fetchone()
        current = row[0] if row is not None else None
    return False


def import_list(
    store: Store,
    sessions: Sequence[Any],
    *,
    on_conflict: str = "skip",
    others: OtherStores = NO_OTHER_STORES,
) -> dict[str, Any]:
    """Import exported sessions all or nothing (see the module docstring); return the summary.

    The summary has ``ok``, ``imported``, ``skipped``, ``replaced``, ``detached``,
    ``imported_ids``, ``skipped_ids``, ``messages``, ``errors`` (each ``{index, session_id?,
    error}``) and ``warnings``. ``on_conflict="replace"`` replaces existing sessions instead of
    skipping them. A session another store of the profile holds (``others``: the vault) is
    skipped as present, and no message gets an id those stores have used.
    """
    if not isinstance(sessions, list | tuple):
        raise ValueError("sessions must be a list")
    if len(sessions) > MAX_SESSIONS:
        raise ValueError(f"sessions must contain at most {MAX_SESSIONS} entries")
    if on_conflict not in import_write.ON_CONFLICT:
        raise ValueError(f"on_conflict must be one of {import_write.ON_CONFLICT}")
    checked: list[_Checked] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    totals = [0, 0]
    for index, raw in enumerate(sessions):
        sid = str(raw.get("id") or "").strip() if isinstance(raw, dict) else ""
        try:
            item = _check(index, raw, seen, totals)
        except _Bad as exc:
            errors.append(_error(index, sid, str(exc)))
            continue
        seen.add(item.session["id"])
        checked.append(item)
    summary: dict[str, Any] = {
        "ok": not errors,
        "imported": 0,
        "skipped": 0,
        "replaced": 0,
        "detached": 0,
        "imported_ids": [],
        "skipped_ids": [],
        "messages": 0,
        "errors": errors,
        "warnings": [],
    }
    if errors:
        return summary
    away = others.where([item.session["id"] for item in checked]) if checked else {}

    def fn(conn: sqlite3.Connection) -> dict[str, Any]:
        out = {**summary, "imported_ids": [], "skipped_ids": [], "warnings": []}
        links: list[tuple[str, str]] = []
        target = Target(store)
        fitting = Fitting()  # per attempt: a transaction replayed after a lock counts once
        plan = IdPlan(others)
        for item in checked:
            try:
                outcome = import_write.write_session(
                    conn,
                    store,
                    item.session,
                    item.messages,
                    on_conflict=on_conflict,
                    target=target,
                    fitting=fitting,
                    plan=plan,
                    elsewhere=away.get(item.session["id"]),
                )
            except import_write.REFUSALS as exc:
                raise _Refused(item.index, item.session["id"], str(exc)) from exc
            if outcome == "skipped" or outcome.startswith(import_write.ELSEWHERE):
                out["skipped_ids"].append(item.session["id"])
                continue
            out["imported_ids"].append(item.session["id"])
            out["replaced"] += outcome == "replaced"
            out["messages"] += len(item.messages)
            if item.parent and item.parent != item.session["id"]:
                links.append((item.session["id"], item.parent))
            elif item.parent:
                out["detached"] += 1
        # A cycle is judged against every link the list asks for, so the link that closes it
        # is the one dropped, and later links may still hang on to the detached session.
        wanted = dict(links)
        for child, parent in links:
            exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone()
            if exists is None or _closes_cycle(conn, child, parent, wanted):
                wanted.pop(child, None)
                out["detached"] += 1
                continue
            conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (parent, child))
        out["imported"] = len(out["imported_ids"]) - out["replaced"]
        out["skipped"] = len(out["skipped_ids"])
        out["warnings"] = fitting.notes()
        return out

    try:
        result: dict[str, Any] = store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)
    except _Refused as exc:
        return {**summary, "ok": False, "errors": [exc.error]}
    return result
