"""The agent's deletes: the guards of a client that showed the user what would go, whole
conversations (every compression part), and the transcript files beside the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_state.agent import transcripts
from hermes_state.records import messages as msg, sessions as ses
from hermes_state.shapes import lineage
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError
from hermes_state.upkeep import deletion, prune


def delete_session(
    store: Store,
    session_id: str,
    sessions_dir: Path | None,
    expected_delete_ids: list[str] | None,
    expected_display_messages: dict[str, list[dict[str, Any]]] | None,
    exclude_active_write_guards: bool,
    include_compression_chain: bool,
) -> bool:
    """Delete a session (and with include_compression_chain its conversation) if every guard
    holds; tell whether it went (SessionDB.delete_session says what the guards are)."""
    conn = store.conn
    if ses.get_session(store, session_id) is None:
        return False
    chain = lineage.compression_lineage(store, session_id) if include_compression_chain else []
    going = deletion.deletion_of(conn, [session_id, *chain])
    if expected_delete_ids is not None and set(expected_delete_ids) != set(going):
        return False
    if expected_display_messages is not None and any(
        msg.message_count(store, sid, live_only=True) != len(shown)
        for sid, shown in expected_display_messages.items()
    ):
        return False
    if exclude_active_write_guards and deletion.in_use(conn, going):
        return False
    try:
        deletion.delete_session(store, session_id, with_ids=chain)
    except SessionNotFoundError:
        return False
    transcripts.remove_session_files(sessions_dir, going)
    return True


def delete_sessions(
    store: Store,
    session_ids: list[str],
    sessions_dir: Path | None,
    exclude_active_write_guards: bool,
    skipped_ids: list[str] | None,
    include_compression_chain: bool,
) -> int:
    """Delete the listed sessions that exist in one transaction; return how many went."""
    ids = list(session_ids)
    if include_compression_chain:
        ids += [
            other
            for sid in session_ids
            if isinstance(sid, str)
            for other in lineage.compression_lineage(store, sid)
        ]
    if exclude_active_write_guards:
        busy = set(deletion.in_use(store.conn, [s for s in ids if isinstance(s, str)]))
        if skipped_ids is not None:
            skipped_ids.extend(sorted(busy))
        ids = [s for s in ids if s not in busy]
    gone = deletion.delete_sessions(store, ids, skipped=skipped_ids)
    transcripts.remove_session_files(sessions_dir, gone)
    return len(gone)


def delete_session_if_empty(store: Store, session_id: str, sessions_dir: Path | None) -> bool:
    """Delete a session that never got a message, title or child; tell whether it went."""
    gone = deletion.delete_session_if_empty(store, session_id)
    if gone:
        transcripts.remove_session_files(sessions_dir, [session_id])
    return gone


def delete_empty_sessions(store: Store, sessions_dir: Path | None) -> int:
    """Delete every ended, unarchived, unpinned empty session; return how many went."""
    gone = deletion.delete_empty_sessions(store)
    transcripts.remove_session_files(sessions_dir, gone)
    return len(gone)


def prune_empty_ghost_sessions(store: Store, sessions_dir: Path | None) -> int:
    """Delete the TUI's empty, untitled sessions ended over a day ago; return how many."""
    gone = prune.prune_empty_ghost_sessions(store)
    transcripts.remove_session_files(sessions_dir, gone)
    return len(gone)


def prune_sessions(
    store: Store,
    older_than_days: float | None,
    source: str | None,
    sessions_dir: Path | None,
    filters: dict[str, Any],
) -> int:
    """Delete ended, unpinned sessions idle longer than the cutoff (and their transcript
    files); return how many."""
    result = prune.prune_sessions(store, older_than_days, source=source, filters=filters)
    transcripts.remove_session_files(sessions_dir, result.session_ids)
    return result.sessions
