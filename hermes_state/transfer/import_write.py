"""Writing imported sessions: one session into the caller's transaction, or a batch of them.

A session is fitted to the store's layout (import_target), its message ids kept or renumbered
(import_ids), its title clash settled; a batch writes each session in a savepoint (one the store
refuses is rolled back alone) and indexes the batch's rows at once (bulkload).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_state.records import messages as msglib, sessions as seslib
from hermes_state.records.ledger import busy_message, open_work_in
from hermes_state.store import bulkload
from hermes_state.store.connection import Store
from hermes_state.store.sql import chunks, escape_like, marks, quote
from hermes_state.transfer.export import AFTER_ID_KEY, USAGE_KEY
from hermes_state.transfer.import_ids import (
    IdPlan,
)
from hermes_state.transfer.import_records import SUMMARY_FLAG
from hermes_state.transfer.import_target import USAGE_TABLE, Fitting, Target

BULK_MIN_MESSAGES = 200  # smaller batches are indexed row by row, by the triggers
ON_CONFLICT = ("skip", "replace")
# A session whose title another session here has: refused (the rest import), imported as
# "Title #2" (the next free number, as compression numbers a continuation), or left out.
ON_TITLE_CLASH = ("fail", "rename", "skip")
ELSEWHERE = "elsewhere:"  # an outcome: the session is in another store of the profile
# Counters the store maintains while inserting; an import puts the exported values back after.
_RESTORED_COUNTERS = ("message_count", "tool_call_count", "last_activity_at")


@dataclass(frozen=True)
class ImportIssue:
    """One session that was not imported: its line in the file, its id if known, and why."""

    line: int
    session_id: str | None
    message: str


# --- import: writing ------------------------------------------------------------------------


class _Refused(Exception):
    """A session the store cannot take as it is (raised inside the write, so it rolls back)."""


def write_session(
    conn: sqlite3.Connection,
    store: Store,
    session: dict[str, Any],
    msgs: list[dict[str, Any]],
    summary_at: Sequence[int] = (),
    *,
    on_conflict: str,
    unlink_parent: bool = True,
    ids: Sequence[int] | None = None,
    target: Target | None = None,
    fitting: Fitting | None = None,
    plan: IdPlan | None = None,
    elsewhere: str | None = None,
    on_title_clash: str = "fail",
) -> str:
    """Insert (or replace) one session and its messages inside the caller's transaction.

    Returns "imported", "replaced", "appended" (a change-feed record of a session already here:
    its messages not here yet were added), "skipped" (it exists and on_conflict is "skip"),
    ELSEWHERE + where (``elsewhere`` names another store of the profile that holds it, such as
    "vault 2025", and this store does not: it is present, never made a second time),
    "title-skipped" (its title is another session's and on_title_clash is "skip") or
    "deferred" (its parent is not in the store yet and ``unlink_parent`` is false). Raises one
    of REFUSALS when the store cannot take it as it is (nothing of it is written then, once the
    caller rolls back). The record is fitted to the store's layout (``target``), and what that
    changed is counted in ``fitting``; ``ids`` are the messages' exported row ids, kept or
    renumbered by ``plan`` (see import_ids).
    """
    target = target or Target(store)
    fitting = fitting if fitting is not None else Fitting()
    plan = plan or IdPlan()
    sid = session["id"]
    exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is not None
    if not exists and elsewhere is not None:
        return ELSEWHERE + elsewhere
    # A change-feed record (export --after-id) carries only newer messages: it appends.
    appending = exists and session.get(AFTER_ID_KEY) is not None
    if exists and on_conflict == "skip" and not appending:
        return "skipped"
    parent = session.get("parent_session_id")
    if parent and parent != sid:
        found = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone()
        if found is None:
            if not unlink_parent:
                return "deferred"
            session = {**session, "parent_session_id": None}
    title = session.get("title")
    if title is not None:
        holder = conn.execute(
            "SELECT id FROM sessions WHERE title = ? AND id <> ?", (title, sid)
        ).fetchone()
        if holder is not None:
            if on_title_clash == "skip" and not appending:
                return "title-skipped"
            if on_title_clash == "skip":
                # A feed's new messages still arrive; the session keeps the title it has here.
                session = {k: v for k, v in session.items() if k != "title"}
            else:
                free = _free_title(conn, title, sid)
                if on_title_clash != "rename" or free is None:
                    raise _Refused(
                        f"title {title!r} is already used by session {holder[0]} in this store"
                        + (
                            f" (--on-title-clash rename imports it as {free!r}, skip leaves it out)"
                            if free is not None
                            else ""
                        )
                    )
                session = {**session, "title": free}
                fitting.retitled.append((sid, title, free))
    usage = session.get(USAGE_KEY) or []
    row = target.session_row(conn, session, fitting)
    above = 0
    own: frozenset[int] = frozenset()
    if appending:
        given = len(msgs)
        msgs, summary_at, ids, above = _not_yet_in(conn, target, sid, msgs, summary_at, ids)
        fitting.already_there += given - len(msgs)
        if target.usage_columns:
            conn.execute(f"DELETE FROM {USAGE_TABLE} WHERE session_id = ?", (sid,))
        _update_session(conn, sid, row)
    elif exists:
        # Replacing empties the session: refused, like delete, while the gateway has work open.
        busy = open_work_in(conn, [sid])
        if busy:
            raise _Refused(busy_message(sid, busy) + "; it was not replaced")
        # The session's own ids may be given back to its messages (nobody else holds them).
        own = frozenset(
            r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))
        )
        conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        if target.usage_columns:
            conn.execute(f"DELETE FROM {USAGE_TABLE} WHERE session_id = ?", (sid,))
        _update_session(conn, sid, row)
    else:
        cols = list(row)
        conn.execute(
            f"INSERT INTO sessions ({', '.join(quote(c) for c in cols)}) "
            f"VALUES ({marks(len(cols))})",
            [row[c] for c in cols],
        )
    target.count_dropped_fields(msgs, fitting)
    # A file without ids (hand-written, or an older export) has nothing to keep.
    exported = ids if ids is not None and len(ids) == len(msgs) else None
    planned = plan.ids_for(conn, exported, len(msgs), fitting, own=own, above=above)
    try:
        new_ids = msglib.insert_messages(
            conn,
            sid,
            msgs,
            columns=target.message_columns,
            ids=planned,
            activity="last_activity_at" in target.session_columns,
            as_given=True,
        )
    except (TypeError, ValueError) as exc:
        raise _Refused(f"bad message: {exc}") from exc
    target.write_usage(conn, sid, usage, fitting)
    summaries = [new_ids[i] for i in summary_at]
    if summaries:
        if SUMMARY_FLAG not in target.message_columns:
            fitting.dropped[f"messages.{SUMMARY_FLAG}"] += len(summaries)
        else:
            for part in chunks(summaries, 500):
                conn.execute(
                    f"UPDATE messages SET {SUMMARY_FLAG} = 1 WHERE id IN ({marks(len(part))})",
                    part,
                )
    restored = [c for c in _RESTORED_COUNTERS if c in row]
    if restored:
        # insert_messages counted the rows again; the exported counters are the truth.
        conn.execute(
            f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in restored)} WHERE id = ?",
            [row[c] for c in restored] + [sid],
        )
    if appending:
        return "appended"
    return "replaced" if exists else "imported"


_NUMBERED = re.compile(r"^(.*) #(\d+)$")


def _free_title(conn: sqlite3.Connection, title: str, session_id: str) -> str | None:
    """Return the next free numbered title ("T" -> "T #2", "T #2" -> "T #3", as compression
    numbers a continuation), or None when it would be longer than a title may be. A session
    that already has a numbered form of the title here (an earlier import renamed it) keeps it."""
    m = _NUMBERED.match(title)
    base = m.group(1) if m else title
    mine = conn.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
    held = _NUMBERED.match(mine[0]) if mine is not None and isinstance(mine[0], str) else None
    if held is not None and held.group(1) == base:
        return str(mine[0])
    highest = 1
    for (held,) in conn.execute(
        "SELECT title FROM sessions WHERE title LIKE ? ESCAPE '\\'", (escape_like(base) + " #%",)
    ):
        n = _NUMBERED.match(held)
        if n and n.group(1) == base:
            highest = max(highest, int(n.group(2)))
    free = f"{base} #{highest + 1}"
    return free if len(free) <= seslib.MAX_TITLE_LENGTH else None


def _update_session(conn: sqlite3.Connection, session_id: str, row: Mapping[str, Any]) -> None:
    """Set a session's columns to the record's (its id stays)."""
    cols = [c for c in row if c != "id"]
    if cols:
        conn.execute(
            f"UPDATE sessions SET {', '.join(f'{quote(c)} = ?' for c in cols)} WHERE id = ?",
            [row[c] for c in cols] + [session_id],
        )


def _not_yet_in(
    conn: sqlite3.Connection,
    target: Target,
    session_id: str,
    msgs: list[dict[str, Any]],
    summary_at: Sequence[int],
    ids: Sequence[int] | None,
) -> tuple[list[dict[str, Any]], list[int], list[int] | None, int]:
    """Keep the messages of a change-feed record the session does not have yet.

    A message is there already when the session holds its message_uid, or (a message
    without one) a row of its id with its role, timestamp and content: an id alone may name
    another message (an earlier import renumbered the session). Returns the messages left,
    their summary positions and ids, and the session's highest id (new ids must come after it
    to keep the conversation's order).
    """
    top = conn.execute(
        "SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    with_uid = "message_uid" in target.message_columns
    uids: set[str] = set()
    if with_uid:
        uids = {
            r[0]
            for r in conn.execute(
                "SELECT message_uid FROM messages WHERE session_id = ? AND message_uid IS NOT NULL",
                (session_id,),
            )
        }
    same: dict[int, tuple[Any, ...]] = {}
    if ids is not None:
        for row in conn.execute(
            "SELECT id, role, timestamp, content FROM messages WHERE session_id = ? AND id >= ?",
            (session_id, min(ids, default=0)),
        ):
            same[row[0]] = tuple(row[1:])
    keep: list[int] = []
    for i, msg in enumerate(msgs):
        uid = msg.get("message_uid")
        if uid is not None and with_uid:
            if uid in uids:
                continue
        elif ids is not None and ids[i] in same:
            mine = (
                msg.get("role"),
                msg.get("timestamp"),
                msglib.encode_content(msg.get("content")),
            )
            if same[ids[i]] == mine:
                continue
        keep.append(i)
    position = {old: new for new, old in enumerate(keep)}
    return (
        [msgs[i] for i in keep],
        [position[i] for i in summary_at if i in position],
        [ids[i] for i in keep] if ids is not None else None,
        int(top),
    )


# What a session the store refuses raises inside its savepoint (the others still import).
REFUSALS = (_Refused, sqlite3.IntegrityError, sqlite3.InterfaceError)
_UNBINDABLE = (OverflowError, UnicodeEncodeError, RecursionError, ValueError)


@dataclass(frozen=True)
class Pending:
    """A validated session waiting for its batch: its line, fields and messages."""

    line: int
    session: dict[str, Any]
    msgs: list[dict[str, Any]]
    summary_at: list[int]
    ids: list[int] | None


def write_batch(
    conn: sqlite3.Connection,
    target: Target,
    batch: Sequence[Pending],
    *,
    on_conflict: str,
    unlink_parent: bool,
    fitting: Fitting,
    before_index: Callable[[], None] | None = None,
    plan: IdPlan | None = None,
    away: Mapping[str, str] | None = None,
    on_title_clash: str = "fail",
) -> list[str | ImportIssue]:
    """Write sessions in the caller's transaction, each in a savepoint; return each outcome.

    A session the store refuses is rolled back to its savepoint (nothing of it is written) and
    reported as an ImportIssue; the others go on. With enough rows the word and substring
    indexes are filled once for the whole batch (bulkload), not row by row; before_index is
    called just before that (the import starts reading the next batch then). ``away`` names
    the sessions another store of the profile holds (see write_session's ``elsewhere``).
    """
    away = away or {}
    rows = sum(len(p.msgs) for p in batch)
    deferred = bulkload.defer_indexing(conn) if rows >= BULK_MIN_MESSAGES else None
    outcomes: list[str | ImportIssue] = []
    for p in batch:
        conn.execute("SAVEPOINT hermes_import_session")
        try:
            outcome: str | ImportIssue = write_session(
                conn,
                target.store,
                p.session,
                p.msgs,
                p.summary_at,
                on_conflict=on_conflict,
                unlink_parent=unlink_parent,
                ids=p.ids,
                target=target,
                fitting=fitting,
                plan=plan,
                elsewhere=away.get(p.session["id"]),
                on_title_clash=on_title_clash,
            )
        except REFUSALS as exc:
            conn.execute("ROLLBACK TO hermes_import_session")
            outcome = ImportIssue(p.line, p.session["id"], str(exc))
        except _UNBINDABLE as exc:
            # A value sqlite3 cannot bind: this session is refused, the others still import.
            conn.execute("ROLLBACK TO hermes_import_session")
            outcome = ImportIssue(p.line, p.session["id"], f"cannot be stored: {exc}")
        conn.execute("RELEASE hermes_import_session")
        outcomes.append(outcome)
    if before_index is not None:
        before_index()
    if deferred is not None:
        bulkload.finish(conn, deferred)
    return outcomes
