"""SessionDB: the thin façade over one store; every method delegates to a concern module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_state import compression, ledger, maintenance, messages, ownership, search, sessions
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

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool:
        """End a session (the first end wins)."""
        return sessions.end_session(self.store, session_id, end_reason, ended_at=ended_at)

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

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin a session; return False when no session has that id."""
        return sessions.set_session_pinned(self.store, session_id, pinned)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive a session; return False when no session has that id."""
        return sessions.set_session_archived(self.store, session_id, archived)

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

    def search_messages(self, query: str, **options: Any) -> search.SearchResult:
        """Search message text; the result says which ordering and route were used."""
        return search.search_messages(self.store, query, **options)

    def count_matches(self, query: str, **options: Any) -> search.MatchCount:
        """Count the messages a search would page through (under a time budget)."""
        return search.count_matches(self.store, query, **options)

    def message_window(
        self, session_id: str, around_id: int | None = None, **options: Any
    ) -> list[dict[str, Any]]:
        """Return the transcript messages around one message (or a session's first ones)."""
        return messages.message_window(self.store, session_id, around_id, **options)

    # maintenance
    def clear_messages(self, session_id: str) -> int:
        """Delete a session's messages, keeping the session."""
        return maintenance.clear_messages(self.store, session_id)

    def delete_session(self, session_id: str) -> int:
        """Delete a session and its messages (refused while its ledger work is open)."""
        return maintenance.delete_session(self.store, session_id)

    def prune_sessions(
        self, older_than_days: float = 90, **options: Any
    ) -> maintenance.PruneResult:
        """Delete ended, unpinned, idle sessions older than the cutoff; return a PruneResult."""
        return maintenance.prune_sessions(self.store, older_than_days, **options)

    def optimize(self, **options: Any) -> maintenance.OptimizeResult:
        """Give space back (FTS optimise, VACUUM); return an OptimizeResult."""
        return maintenance.optimize(self.store, **options)

    # compression generations and ownership
    def compact_session(
        self, session_id: str, kept_messages: list[dict[str, Any]]
    ) -> compression.CompactionResult:
        """Archive the live generation and insert the retained context as the new one."""
        return compression.compact_session(self.store, session_id, kept_messages)

    def rotate_session(
        self, old_id: str, new_id: str, **options: Any
    ) -> compression.RotationResult:
        """Continue a session in a child and end it with end_reason='compression'."""
        return compression.rotate_session(self.store, old_id, new_id, **options)

    def compression_successor(self, session_id: str) -> str | None:
        """Return the child continuing a session ended by compression."""
        return compression.compression_successor(self.store, session_id)

    def compression_ancestors(self, session_id: str) -> list[str]:
        """Return the sessions this one continues, nearest first."""
        return compression.compression_ancestors(self.store, session_id)

    def compression_tip(self, session_id: str) -> str:
        """Return the live end of a session's compression chain."""
        return compression.compression_tip(self.store, session_id)

    def find_owned_input(
        self, session_id: str, marker: dict[str, Any], **options: Any
    ) -> ownership.OwnedInput | None:
        """Find the row that already holds an input marker (the exception-path lookup)."""
        return ownership.find_owned_input(self.store, session_id, marker, **options)

    # runtime ledger
    def begin_owner_epoch(self, instance_id: str) -> int:
        """Start a new owner epoch; started work of older epochs becomes unknown."""
        return ledger.begin_owner_epoch(self.store, instance_id)

    def admit(self, session_id: str, request_id: str, payload: dict[str, Any]) -> ledger.Admission:
        """Queue an input for a session (idempotent on request_id)."""
        return ledger.admit(self.store, session_id, request_id, payload)

    def next_admission(self, session_id: str) -> ledger.Admission | None:
        """Return the next queued input, or None while an earlier one is unresolved."""
        return ledger.next_admission(self.store, session_id)

    def start_admission(self, admission_id: str, epoch: int) -> ledger.Admission:
        """Mark a queued input started by the owner of epoch."""
        return ledger.start(self.store, admission_id, epoch)

    def finish_admission(self, admission_id: str, outcome: str) -> ledger.Admission:
        """Mark a started input terminal with its outcome."""
        return ledger.finish(self.store, admission_id, outcome)

    def resolve_unknown(self, admission_id: str, outcome: str) -> ledger.Admission:
        """Settle an input whose owner was lost (prompt.resolve_unknown)."""
        return ledger.resolve_unknown(self.store, admission_id, outcome)

    def register_execution(
        self, execution_id: str, session_id: str, kind: str, epoch: int
    ) -> ledger.Execution:
        """Record a managed worker execution bound to a session."""
        return ledger.register_execution(self.store, execution_id, session_id, kind, epoch)

    def record_receipt(
        self, execution_id: str, sequence: int, payload: dict[str, Any]
    ) -> ledger.Receipt:
        """Record a worker's next result (replays with the same digest are returned)."""
        return ledger.record_receipt(self.store, execution_id, sequence, payload)

    def finish_execution(self, execution_id: str) -> ledger.Execution:
        """Mark a worker execution terminal."""
        return ledger.finish_execution(self.store, execution_id)
