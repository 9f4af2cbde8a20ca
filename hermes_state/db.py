"""SessionDB: the thin façade over one store; every method delegates to a concern module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_state import maintenance, messages, sessions
from hermes_state.connection import Store, open_store
from hermes_state.home import default_db_path


class SessionDB:
    """One profile's session store (default: get_hermes_home() / "state.db")."""

    def __init__(self, db_path: Path | str | None = None, *, read_only: bool = False) -> None:
        self.path = Path(db_path).expanduser() if db_path is not None else default_db_path()
        self.store: Store = open_store(self.path, read_only=read_only)

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (read-only open, or a store newer than this code)."""
        return self.store.read_only or self.store.too_new

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store (a writable handle checkpoints PASSIVE first)."""
        self.store.close()

    # sessions
    def create_session(self, session_id: str, source: str, **columns: Any) -> str:
        """Create a session, or fill in what an earlier writer left empty."""
        return sessions.create_session(self.store, session_id, source, **columns)

    def end_session(self, session_id: str, end_reason: str) -> bool:
        """End a session (the first end wins)."""
        return sessions.end_session(self.store, session_id, end_reason)

    def reopen_session(self, session_id: str) -> None:
        """Clear a session's end."""
        sessions.reopen_session(self.store, session_id)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Return one session's columns, or None."""
        return sessions.get_session(self.store, session_id)

    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """Return the id equal to, or uniquely prefixed by, the text."""
        return sessions.resolve_session_id(self.store, id_or_prefix)

    def find_session(self, ref: str) -> str:
        """Resolve an id, unique prefix or title, or raise SessionNotFoundError."""
        return sessions.find_session(self.store, ref)

    def set_session_title(self, session_id: str, title: str | None) -> str | None:
        """Set or clear a session's title (unique, sanitised, ≤ 100 chars)."""
        return sessions.set_session_title(self.store, session_id, title)

    def get_session_title(self, session_id: str) -> str | None:
        """Return a session's title."""
        return sessions.get_session_title(self.store, session_id)

    def resolve_session_by_title(self, title: str) -> str | None:
        """Return the newest session of a title's lineage."""
        return sessions.resolve_session_by_title(self.store, title)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """Return the next numbered title of a lineage ("T #2", …)."""
        return sessions.get_next_title_in_lineage(self.store, base_title)

    def get_lineage(self, session_id: str) -> list[dict[str, Any]]:
        """Return a session's ancestors, root first, ending with the session."""
        return sessions.get_lineage(self.store, session_id)

    def get_descendants(self, session_id: str) -> list[dict[str, Any]]:
        """Return every session descending from this one."""
        return sessions.get_descendants(self.store, session_id)

    def list_sessions(self, **filters: Any) -> list[dict[str, Any]]:
        """Return one page of sessions with preview and last_active."""
        return sessions.list_sessions(self.store, **filters)

    def record_usage(self, session_id: str, model: str, **usage: Any) -> None:
        """Add an API call's tokens and cost to a session."""
        sessions.record_usage(self.store, session_id, model, **usage)

    def usage_by_model(self) -> list[dict[str, Any]]:
        """Return tokens and cost per model."""
        return sessions.usage_by_model(self.store)

    def top_sessions_by_tokens(self, n: int = 10) -> list[dict[str, Any]]:
        """Return the sessions that used the most tokens."""
        return sessions.top_sessions_by_tokens(self.store, n)

    def counts_by_source(self) -> list[dict[str, Any]]:
        """Return session and message counts per source."""
        return sessions.counts_by_source(self.store)

    def store_stats(self) -> dict[str, Any]:
        """Return file sizes, page counts and row counts."""
        return sessions.store_stats(self.store)

    # messages
    def append_message(self, session_id: str, role: str, content: Any = None, **fields: Any) -> int:
        """Append one message; return its row id."""
        return messages.append_message(self.store, session_id, role, content, **fields)

    def append_messages(self, session_id: str, batch: list[dict[str, Any]]) -> list[int]:
        """Append messages in one transaction; return their row ids."""
        return messages.append_messages(self.store, session_id, batch)

    def get_messages(self, session_id: str, **options: Any) -> list[dict[str, Any]]:
        """Return a session's messages in id order."""
        return messages.get_messages(self.store, session_id, **options)

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]:
        """Return a session's live messages as OpenAI-style dicts."""
        return messages.get_messages_as_conversation(self.store, session_id)

    # maintenance
    def clear_messages(self, session_id: str) -> int:
        """Delete a session's messages, keeping the session."""
        return maintenance.clear_messages(self.store, session_id)

    def delete_session(self, session_id: str) -> int:
        """Delete a session and its messages."""
        return maintenance.delete_session(self.store, session_id)
