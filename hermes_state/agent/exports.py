"""The agent's export records: one session, every session, or a whole conversation as one
record, each with the generations of messages the caller asked for."""

from __future__ import annotations

from typing import Any

from hermes_state.records import sessions as ses
from hermes_state.shapes import lineage
from hermes_state.store.connection import Store
from hermes_state.transfer import export as export_lib


def export_session(
    store: Store, session_id: str, include_compacted: bool, include_inactive: bool
) -> dict[str, Any] | None:
    """Return one session with its "messages" (live ones unless asked), or None."""
    if ses.get_session(store, session_id) is None:
        return None
    record = export_lib.export_session(store, session_id)
    record["messages"] = export_lib.live_messages(
        record["messages"],
        include_compacted=include_compacted,
        include_inactive=include_inactive,
    )
    return record


def export_all(
    store: Store, source: str | None, include_compacted: bool, include_inactive: bool
) -> list[dict[str, Any]]:
    """Return every session (of one source) with its messages, as export_session does."""
    return [
        {
            **record,
            "messages": export_lib.live_messages(
                record["messages"],
                include_compacted=include_compacted,
                include_inactive=include_inactive,
            ),
        }
        for record in export_lib.export_all(store, source=source)
    ]


def export_session_lineage(
    store: Store, session_id: str, include_compacted: bool, include_inactive: bool
) -> dict[str, Any] | None:
    """Return a whole conversation as one record: the newest part's columns, every part's
    messages in order, ``segments`` and ``lineage_session_ids``."""
    parts = [
        p
        for p in (
            export_session(store, sid, include_compacted, include_inactive)
            for sid in lineage.compression_lineage(store, session_id)
        )
        if p is not None
    ]
    if not parts:
        return None
    record = dict(parts[-1])
    record["segments"] = parts
    record["lineage_session_ids"] = [p["id"] for p in parts]
    record["messages"] = [m for p in parts for m in p["messages"]]
    record["message_count"] = len(record["messages"])
    return record
