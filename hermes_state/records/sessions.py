"""Session rows: create/end, lookup by id/prefix/title, titles, flags, lineage (pages of them:
:mod:`session_list`)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

from hermes_state.shapes import values
from hermes_state.shapes.lineage import ancestors_in, tip_in
from hermes_state.shapes.text import bindable, scrub_surrogates
from hermes_state.store.connection import Store
from hermes_state.store.errors import (
    AmbiguousSessionIdError,
    HermesStateError,
    InvalidTitleError,
    SessionNotFoundError,
    TitleInUseError,
    missing_column,
)
from hermes_state.store.home import named_profile_of
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S
from hermes_state.store.schema import column_names
from hermes_state.store.sql import escape_like

MAX_TITLE_LENGTH = 100

# Columns a caller may set at creation; counters, timestamps and flags are the store's business.
CREATE_COLUMNS = frozenset(
    {
        "user_id",
        "model",
        "model_config",
        "system_prompt",
        "parent_session_id",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "display_name",
        "origin_json",
        "cwd",
        "git_branch",
        "git_repo_root",
        "profile_name",
        "transport_profile",
        "billing_provider",
        "billing_base_url",
        "billing_mode",
    }
)
INHERITED_FROM_PARENT = ("cwd", "git_branch", "git_repo_root")


def _encode_json(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def create_session(
    store: Store,
    session_id: str,
    source: str,
    *,
    started_at: float | None = None,
    **columns: Any,
) -> str:
    """Create a session row, or fill in what an earlier writer left empty; return its id."""
    unknown = set(columns) - CREATE_COLUMNS
    if unknown:
        raise TypeError(f"create_session() got unexpected columns: {', '.join(sorted(unknown))}")
    if not session_id or not isinstance(session_id, str):
        raise ValueError("session_id must be a non-empty string")
    values = {k: scrub_surrogates(_encode_json(v)) for k, v in columns.items() if v is not None}
    values.setdefault("profile_name", named_profile_of(store.path.parent))
    values = {k: v for k, v in values.items() if v is not None}
    now = time.time() if started_at is None else float(started_at)

    def fn(conn: sqlite3.Connection) -> str:
        parent = values.get("parent_session_id")
        if parent is not None:
            prow = conn.execute(
                "SELECT cwd, git_branch, git_repo_root FROM sessions WHERE id = ?", (parent,)
            ).fetchone()
            if prow is None:
                raise SessionNotFoundError(f"Parent session {parent} does not exist")
            for col in INHERITED_FROM_PARENT:
                if col not in values and prow[col] is not None:
                    values[col] = prow[col]
        cols = ["id", "source", "started_at", *values]
        params = [session_id, source, now, *values.values()]
        # Never overwrite what an earlier writer set: only NULLs (and a placeholder source) fill.
        updates = [
            "source = CASE WHEN sessions.source = 'unknown' THEN excluded.source"
            " ELSE sessions.source END"
        ]
        updates += [f'"{c}" = COALESCE(sessions."{c}", excluded."{c}")' for c in values]
        quoted = ", ".join(f'"{c}"' for c in cols)
        conn.execute(
            f"INSERT INTO sessions ({quoted}) "
            f"VALUES ({', '.join('?' for _ in cols)}) "
            f"ON CONFLICT(id) DO UPDATE SET {', '.join(updates)}",
            params,
        )
        return session_id

    return store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)


def ensure_session(
    store: Store, session_id: str, source: str = "unknown", model: str | None = None, **columns: Any
) -> str:
    """Make sure a session row exists (an upsert that only fills what is still empty)."""
    return create_session(store, session_id, source, model=model, **columns)


def update_system_prompt(store: Store, session_id: str, system_prompt: str | None) -> None:
    """Store a session's assembled system prompt.

    Kept inline in ``sessions.system_prompt`` (and any content-addressed hash cleared): every
    release reads the inline column — Hermes Agent 0.19 knows no other — while 0.21+ prefer the
    hash only when one is set.
    """
    clean = scrub_surrogates(system_prompt) if system_prompt is not None else None
    with_hash = "system_prompt_hash" in store.columns("sessions")

    def fn(conn: sqlite3.Connection) -> None:
        require_session_in(conn, session_id)
        if with_hash:
            conn.execute(
                "UPDATE sessions SET system_prompt = ?, system_prompt_hash = NULL WHERE id = ?",
                (clean, session_id),
            )
        else:
            conn.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?", (clean, session_id))

    store.write(fn)


def end_session(
    store: Store, session_id: str, end_reason: str, *, ended_at: float | None = None
) -> bool:
    """Mark a session ended (the first end wins); return whether this call ended it."""
    when = time.time() if ended_at is None else float(ended_at)

    def fn(conn: sqlite3.Connection) -> bool:
        require_session_in(conn, session_id)
        cur = conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            (when, end_reason, session_id),
        )
        return cur.rowcount == 1

    return store.write(fn)


def reopen_session(store: Store, session_id: str) -> None:
    """Clear a session's end so it can receive messages again."""

    def fn(conn: sqlite3.Connection) -> None:
        require_session_in(conn, session_id)
        conn.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (session_id,)
        )

    store.write(fn)


# Ends the gateway's recovery treats as accidents (a reset after them must still count as one).
ACCIDENTAL_END_REASONS = ("agent_close", "ws_orphan_reap")


def promote_to_session_reset(store: Store, session_id: str, reason: str = "session_reset") -> bool:
    """End a session as a deliberate reset; tell whether it was changed.

    A live session, or one ended by accident, is ended with ``reason``; any other end (a
    compression, an earlier reset) stays, since the first deliberate end wins. Never raises:
    False also covers an unknown session and a store that could not be written.
    """
    if not session_id:
        return False
    accidental = ", ".join(f"'{r}'" for r in ACCIDENTAL_END_REASONS)

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? "
            f"AND (ended_at IS NULL OR end_reason IN ({accidental}))",
            (time.time(), bindable(reason), bindable(session_id)),
        )
        return cur.rowcount > 0

    try:
        return store.write(fn)
    except (HermesStateError, sqlite3.Error):
        return False


def update_session_meta(
    store: Store, session_id: str, model_config_json: str, model: str | None = None
) -> None:
    """Replace a session's model_config (JSON text) and, when given, its model."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET model_config = ?, model = COALESCE(?, model) WHERE id = ?",
            (scrub_surrogates(model_config_json), bindable(model), bindable(session_id)),
        )
    )


def require_session_in(conn: sqlite3.Connection, session_id: str) -> None:
    """Raise SessionNotFoundError unless the session exists (inside the caller's transaction)."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(f"No session with id {session_id}")


def get_session(store: Store, session_id: str) -> dict[str, Any] | None:
    """Return every column of one session (extra columns of older layouts included), or None."""
    row = store.conn.execute(
        "SELECT * FROM sessions WHERE id = ?", (bindable(session_id),)
    ).fetchone()
    if row is None:
        return None
    out = {c: None for c in column_names("sessions")}
    out.update(dict(row))
    values.clean_row(out)
    resolve_prompts(store, out)
    return out


def resolve_prompts(store: Store, row: dict[str, Any]) -> None:
    """Put a session row's prompt texts in place of their content addresses (in place).

    The agent's newer layouts keep the system prompt (``system_prompt_hash``) and the tool pin
    (``tool_names`` holding a hash) in the ``system_prompts`` table, once per content.
    """
    wanted = []
    if row.get("system_prompt") is None and row.get("system_prompt_hash"):
        wanted.append(("system_prompt", row["system_prompt_hash"]))
    pin = row.get("tool_names")
    if isinstance(pin, str) and len(pin) == 64:
        wanted.append(("tool_names", pin))
    if not wanted or not store.has_table("system_prompts"):
        return
    for column, digest in wanted:
        found = store.conn.execute(
            "SELECT prompt FROM system_prompts WHERE hash = ?", (digest,)
        ).fetchone()
        if found is not None:
            row[column] = found[0]


def require_session(store: Store, session_id: str) -> dict[str, Any]:
    """Return one session or raise SessionNotFoundError."""
    row = get_session(store, session_id)
    if row is None:
        raise SessionNotFoundError(f"No session with id {session_id}")
    return row


def resolve_session_id(store: Store, id_or_prefix: str) -> str | None:
    """Return the session id that equals or uniquely starts with the text, else None."""
    if not id_or_prefix:
        return None
    id_or_prefix = bindable(id_or_prefix)
    conn = store.conn
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (id_or_prefix,)).fetchone():
        return id_or_prefix
    # A range over the primary key index instead of LIKE: no escaping and no scan.
    rows = conn.execute(
        "SELECT id FROM sessions WHERE id > ? AND id < ? ORDER BY id LIMIT 6",
        (id_or_prefix, id_or_prefix + "\U0010ffff"),
    ).fetchall()
    if not rows:
        return None
    if len(rows) > 1:
        shown = ", ".join(r[0] for r in rows[:5])
        raise AmbiguousSessionIdError(
            f"'{id_or_prefix}' matches more than one session: {shown}"
            + (", …" if len(rows) > 5 else "")
        )
    return str(rows[0][0])


def find_session(store: Store, ref: str) -> str:
    """Resolve an id, unique id prefix or title to a session id, or raise SessionNotFoundError."""
    found = resolve_session_id(store, ref)
    if found is None:
        found = resolve_session_by_title(store, ref)
    if found is None:
        raise SessionNotFoundError(f"No session matches '{ref}' (by id, id prefix or title)")
    return found


def find_session_exact(store: Store, ref: str) -> str:
    """Resolve the session an edit or a deletion acts on: its id, a unique id prefix, or its
    exact title — nothing looser. Anything else raises SessionNotFoundError naming candidates.

    Reading may be fuzzy (:func:`find_session` follows a title's lineage to its newest
    session); changing or destroying must name exactly one session.
    """
    found = resolve_session_id(store, ref)  # an ambiguous prefix raises, listing its matches
    if found is not None:
        return found
    row = store.conn.execute("SELECT id FROM sessions WHERE title = ?", (bindable(ref),)).fetchone()
    if row is not None:
        return str(row[0])
    clean = sanitize_title(ref) if len(ref) <= MAX_TITLE_LENGTH else None
    # Candidates: titles that start with what was typed, in any case ("#2" of a lineage too).
    near = store.conn.execute(
        "SELECT id, title FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\' "
        "ORDER BY started_at DESC LIMIT 5",
        (clean, escape_like(clean or ref) + "%"),
    ).fetchall()
    hint = "; similar: " + ", ".join(f"{r[0]} ({r[1]})" for r in near) if near else ""
    raise SessionNotFoundError(
        f"No session has the id, id prefix or exact title '{ref}'{hint}",
        hint="Name the session by its id (see: hermes sessions list).",
    )


def continued_as(store: Store, session_id: str) -> str | None:
    """Return the newest continuation of a session compression ended, or None if it is the tip."""
    tip = tip_in(store.conn, session_id)
    return None if tip == session_id else tip


# --- titles ---------------------------------------------------------------------------------

_TITLE_STRIP_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]"
)
_NUMBERED_RE = re.compile(r"^(.*) #(\d+)$")


def sanitize_title(title: str | None) -> str | None:
    """Clean a title (control/zero-width characters out, whitespace collapsed); None if empty."""
    if title is None:
        return None
    text = _TITLE_STRIP_RE.sub("", scrub_surrogates(title))
    text = " ".join(text.split())
    if not text:
        return None
    if len(text) > MAX_TITLE_LENGTH:
        raise InvalidTitleError(f"Title too long ({len(text)} chars, max {MAX_TITLE_LENGTH})")
    return text


def set_session_title(
    store: Store,
    session_id: str,
    title: str | None,
    *,
    source: str = "user",
    only_if_empty: bool = False,
) -> str | None:
    """Set (or with None/empty clear) a session's title; return the stored title.

    Titles are unique. When the title is held by a session this one continues through
    compression (an ended part of the same conversation, hidden behind it in pickers), it moves
    here instead of conflicting: renaming the live tip back to the conversation's name must
    work. ``only_if_empty`` sets it only when the session has none yet (an automatic title never
    replaces the user's); the current title is returned then.
    """
    clean = sanitize_title(title)
    # Stores of older schemas (Hermes Agent 0.19) have no title_source: write what they have.
    with_source = "title_source" in store.columns("sessions")

    def fn(conn: sqlite3.Connection) -> str | None:
        row = conn.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(f"No session with id {session_id}")
        if only_if_empty and row[0] is not None:
            return str(row[0])
        if clean is not None:
            holder = conn.execute(
                "SELECT id FROM sessions WHERE title = ? AND id <> ?", (clean, session_id)
            ).fetchone()
            if holder is not None:
                if holder[0] not in ancestors_in(conn, session_id):
                    raise TitleInUseError(clean, holder[0])
                conn.execute("UPDATE sessions SET title = NULL WHERE id = ?", (holder[0],))
        if with_source:
            conn.execute(
                "UPDATE sessions SET title = ?, title_source = ? WHERE id = ?",
                (clean, source if clean is not None else None, session_id),
            )
        else:
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
        return clean

    return store.write(fn)


def get_session_title(store: Store, session_id: str) -> str | None:
    """Return a session's title (None when untitled)."""
    row = store.conn.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"No session with id {session_id}")
    return None if row[0] is None else str(row[0])


def set_auto_title_if_empty(store: Store, session_id: str, title: str) -> bool:
    """Set a generated title only while the session has none; tell whether it was set."""
    try:
        before = get_session_title(store, session_id)
        if before is not None:
            return False
        got = set_session_title(store, session_id, title, source="auto", only_if_empty=True)
    except SessionNotFoundError:
        return False
    return got is not None and got == sanitize_title(title)


def _set_flag(store: Store, session_id: str, column: str, value: bool) -> bool:
    """Set a 0/1 column of one session; return whether a session row was updated."""
    if column not in store.columns("sessions"):
        version = store.layout.version if store.layout is not None else None
        raise missing_column(store.path, f"sessions.{column}", version)

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            f"UPDATE sessions SET {column} = ? WHERE id = ?", (int(bool(value)), session_id)
        )
        return cur.rowcount == 1

    return store.write(fn)


def set_session_pinned(store: Store, session_id: str, pinned: bool) -> bool:
    """Pin (keep from pruning) or unpin a session; return False when no session has that id."""
    return _set_flag(store, bindable(session_id), "pinned", pinned)


def set_session_archived(store: Store, session_id: str, archived: bool) -> bool:
    """Archive (hide from listings) or unarchive a session; False when no such session."""
    return _set_flag(store, bindable(session_id), "archived", archived)


def get_session_by_title(store: Store, title: str) -> dict[str, Any] | None:
    """Return the session whose title is exactly this one, or None."""
    row = store.conn.execute(
        "SELECT id FROM sessions WHERE title = ?", (bindable(title),)
    ).fetchone()
    return None if row is None else get_session(store, row[0])


def resolve_session_by_title(store: Store, title: str) -> str | None:
    """Return the newest session of a title's lineage ("T" or "T #N"), or None."""
    clean = sanitize_title(title)
    if clean is None:
        return None
    m = _NUMBERED_RE.match(clean)
    base = m.group(1) if m else clean
    if m:  # an explicit number names exactly that session
        row = store.conn.execute("SELECT id FROM sessions WHERE title = ?", (clean,)).fetchone()
        return row[0] if row else None
    row = store.conn.execute(
        "SELECT id FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\' "
        "ORDER BY started_at DESC, rowid DESC LIMIT 1",
        (base, escape_like(base) + " #%"),
    ).fetchone()
    return row[0] if row else None


def get_next_title_in_lineage(store: Store, base_title: str) -> str:
    """Return the next free numbered title: "T" → "T #2" (the unnumbered original is #1)."""
    clean = sanitize_title(base_title)
    if clean is None:
        raise InvalidTitleError("Title is empty")
    m = _NUMBERED_RE.match(clean)
    base = m.group(1) if m else clean
    rows = store.conn.execute(
        "SELECT title FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\'",
        (base, escape_like(base) + " #%"),
    ).fetchall()
    if not rows:
        return base
    highest = 1
    for (t,) in rows:
        n = _NUMBERED_RE.match(t)
        if n and n.group(1) == base:
            highest = max(highest, int(n.group(2)))
    nxt = f"{base} #{highest + 1}"
    if len(nxt) > MAX_TITLE_LENGTH:
        raise InvalidTitleError(f"Title too long ({len(nxt)} chars, max {MAX_TITLE_LENGTH})")
    return nxt


# --- lineage --------------------------------------------------------------------------------


def get_lineage(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Return the session and its ancestors through parent_session_id, root first."""
    rows = store.conn.execute(
        "WITH RECURSIVE up(id, parent_session_id, depth) AS ("
        " SELECT id, parent_session_id, 0 FROM sessions WHERE id = ?"
        " UNION ALL SELECT s.id, s.parent_session_id, up.depth + 1 FROM sessions s"
        " JOIN up ON s.id = up.parent_session_id WHERE up.depth < 10000)"
        " SELECT s.id, s.title, s.started_at, s.parent_session_id, s.end_reason FROM up"
        " JOIN sessions s ON s.id = up.id ORDER BY up.depth DESC",
        (session_id,),
    ).fetchall()
    if not rows:
        raise SessionNotFoundError(f"No session with id {session_id}")
    return [dict(r) for r in rows]


def get_descendants(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Return every session descending from this one (children, grandchildren, …), nearest first."""
    rows = store.conn.execute(
        "WITH RECURSIVE down(id, depth) AS ("
        " SELECT id, 0 FROM sessions WHERE id = ?"
        " UNION SELECT s.id, down.depth + 1 FROM sessions s"
        " JOIN down ON s.parent_session_id = down.id WHERE down.depth < 10000)"
        " SELECT s.id, s.title, s.started_at, s.parent_session_id, s.end_reason, down.depth"
        " FROM down JOIN sessions s ON s.id = down.id WHERE down.depth > 0"
        " ORDER BY down.depth, s.started_at",
        (session_id,),
    ).fetchall()
    return [dict(r) for r in rows]
