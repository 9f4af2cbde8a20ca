"""Input ownership markers and the gateway's exception-path lookup (who already wrote this turn).

A received input carries a marker under ``display_metadata["owner"]``; it is never sent to a
provider (``conversation.strip_owner``). The lookup reads only markers: never bodies, never the
whole history. When it cannot read them it raises, so the caller never appends on a guess.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hermes_state.records.messages import OWNER_KEY
from hermes_state.shapes.lineage import ancestors_in, successor_in, tip_in
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError
from hermes_state.store.schema import OWNER_ID_EXPR
from hermes_state.store.sql import marks

MARKER_VERSION = 1
OWNER_WRITER_EXPR = (
    "CASE WHEN json_valid(display_metadata)"
    " THEN json_extract(display_metadata, '$.owner.writer') END"
)
_COUNTED = "(active = 1 OR compacted = 1) AND COALESCE(observed, 0) = 0"


class OwnershipLookupError(HermesStateError):
    """The ownership markers could not be read; the caller must not append on a guess."""

    hint = "Do not append the input; report that the history could not be read, then retry."


@dataclass(frozen=True)
class OwnedInput:
    """A stored row that carries the marker being looked for."""

    message_id: int
    session_id: str
    marker_id: str
    archived: bool  # True when the row is in a compression archive (active=0, compacted=1)
    writer: str | None

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        return {
            "message_id": self.message_id,
            "session_id": self.session_id,
            "marker_id": self.marker_id,
            "archived": self.archived,
            "writer": self.writer,
        }


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def platform_marker(
    platform: str,
    profile: str | None,
    scope: str | None,
    chat_id: str | int | None,
    thread_id: str | int | None,
    inbound_message_id: str | int,
    *,
    writer: str | None = None,
) -> dict[str, Any]:
    """Return the deterministic marker of one platform inbound message (unique per the tuple)."""
    if not platform or inbound_message_id is None or str(inbound_message_id) == "":
        raise ValueError("platform and inbound_message_id are required for a platform marker")
    # Ids are compared as text: adapters hand out 123 and "123" for the same message.
    key = [_text(v) for v in (platform, profile, scope, chat_id, thread_id, inbound_message_id)]
    digest = hashlib.sha256(
        json.dumps(key, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    ).hexdigest()[:32]
    marker: dict[str, Any] = {"v": MARKER_VERSION, "kind": "platform", "id": f"p:{digest}"}
    if writer is not None:
        marker["writer"] = writer
    return marker


def fresh_marker(*, writer: str | None = None) -> dict[str, Any]:
    """Return a new marker for an un-keyed turn (unique even for identical text and time)."""
    marker: dict[str, Any] = {"v": MARKER_VERSION, "kind": "fresh", "id": f"f:{uuid.uuid4().hex}"}
    if writer is not None:
        marker["writer"] = writer
    return marker


def with_marker(
    display_metadata: Mapping[str, Any] | None, marker: Mapping[str, Any]
) -> dict[str, Any]:
    """Return display metadata carrying the marker under the owner key (other keys kept)."""
    out = dict(display_metadata or {})
    out[OWNER_KEY] = dict(marker)
    return out


def search_order(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Return the sessions the lookup searches, in order: forward target, successor, ancestors."""
    tip = tip_in(conn, session_id)
    order = [tip, successor_in(conn, session_id), *ancestors_in(conn, tip), session_id]
    return list(dict.fromkeys(s for s in order if s is not None))


def find_owned_input(
    store: Store,
    session_id: str,
    marker: Mapping[str, Any],
    *,
    writer: str | None = None,
) -> OwnedInput | None:
    """Return the row that already holds this input's marker, searching the compression chain.

    Counts live rows and compression archives written by the same writer (``writer``, else the
    marker's own); skips rewound rows, observed rows and other writers' rows. Raises
    OwnershipLookupError when markers cannot be read.
    """
    marker_id = marker.get("id") if isinstance(marker, Mapping) else None
    if not isinstance(marker_id, str) or not marker_id:
        raise ValueError("marker must be a dict with a non-empty 'id'")
    expected_writer = writer if writer is not None else marker.get("writer")
    try:
        return _find(store.conn, session_id, marker_id, expected_writer)
    except sqlite3.Error as exc:
        raise OwnershipLookupError(
            f"Could not read ownership markers of session {session_id}: {exc}"
        ) from exc


def _find(
    conn: sqlite3.Connection, session_id: str, marker_id: str, writer: str | None
) -> OwnedInput | None:
    order = search_order(conn, session_id)
    qs = marks(len(order))
    bad = conn.execute(
        f"SELECT id, session_id FROM messages WHERE session_id IN ({qs})"
        " AND display_metadata IS NOT NULL AND NOT json_valid(display_metadata)"
        f" AND {_COUNTED} LIMIT 1",
        order,
    ).fetchone()
    if bad is not None:
        raise OwnershipLookupError(
            f"Message {bad[0]} of session {bad[1]} has unreadable display metadata; "
            "cannot tell whether it holds this input"
        )
    rows = conn.execute(
        f"SELECT id, session_id, compacted, active, {OWNER_WRITER_EXPR} AS writer"
        f" FROM messages WHERE {OWNER_ID_EXPR} = ? AND display_metadata IS NOT NULL"
        f" AND session_id IN ({qs}) AND {_COUNTED} AND {OWNER_WRITER_EXPR} IS ?",
        [marker_id, *order, writer],
    ).fetchall()
    if not rows:
        return None
    rank = {s: i for i, s in enumerate(order)}
    # Nearest session in the search order first; within it, a live row before an archive.
    best = min(rows, key=lambda r: (rank[r["session_id"]], -int(r["active"]), -int(r["id"])))
    return OwnedInput(
        message_id=int(best["id"]),
        session_id=best["session_id"],
        marker_id=marker_id,
        archived=not best["active"],
        writer=best["writer"],
    )
