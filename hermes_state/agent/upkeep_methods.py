"""SessionDB's upkeep methods: delete, prune, archive, optimize, and state_meta."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hermes_state.agent import auto_maintenance, delete_guards
from hermes_state.agent.handle import StoreHandle
from hermes_state.store import fts, meta
from hermes_state.upkeep import deletion, prune, reclaim


class UpkeepMethods(StoreHandle):
    """SessionDB's upkeep methods, each a delegation to its concern."""

    # --- maintenance ---------------------------------------------------------------------------

    def clear_messages(self, session_id: str) -> None:
        """Delete a session's messages, keeping the session."""
        deletion.clear_messages(self.store, session_id)

    def delete_session(
        self,
        session_id: str,
        sessions_dir: Path | None = None,
        expected_delete_ids: list[str] | None = None,
        expected_display_messages: dict[str, list[dict[str, Any]]] | None = None,
        exclude_active_write_guards: bool = False,
        include_compression_chain: bool = False,
    ) -> bool:
        """Delete a session, its messages and the runs it delegated; False when nothing went.

        ``include_compression_chain`` deletes the whole conversation (every compression part).
        The guards of a client that showed the user what would go: ``expected_delete_ids``
        (exactly those sessions would be deleted) and ``expected_display_messages`` (each listed
        session still has that many live messages); ``exclude_active_write_guards`` keeps a
        session the agent is using (a live compression lock or turn lease). When a guard does
        not hold, nothing is deleted and the answer is False. Refused (LedgerBusyError) while
        runtime-ledger work is open. With ``sessions_dir`` the transcript files go too.
        """
        return delete_guards.delete_session(
            self.store,
            session_id,
            sessions_dir,
            expected_delete_ids,
            expected_display_messages,
            exclude_active_write_guards,
            include_compression_chain,
        )

    def delete_sessions(
        self,
        session_ids: list[str],
        sessions_dir: Path | None = None,
        exclude_active_write_guards: bool = False,
        skipped_ids: list[str] | None = None,
        include_compression_chain: bool = False,
    ) -> int:
        """Delete the listed sessions that exist in one transaction; return how many went.

        A session with open ledger work (or, with ``exclude_active_write_guards``, one the agent
        is using) is kept and its id appended to ``skipped_ids``. ``include_compression_chain``
        takes each one's whole conversation.
        """
        return delete_guards.delete_sessions(
            self.store,
            session_ids,
            sessions_dir,
            exclude_active_write_guards,
            skipped_ids,
            include_compression_chain,
        )

    def delete_session_if_empty(self, session_id: str, sessions_dir: Path | None = None) -> bool:
        """Delete a session that never got a message, title or child; tell whether it went."""
        return delete_guards.delete_session_if_empty(self.store, session_id, sessions_dir)

    def count_empty_sessions(self) -> int:
        """Count the ended, unarchived sessions without any message."""
        return deletion.count_empty_sessions(self.store)

    def delete_empty_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete every ended, unarchived, unpinned empty session; return how many went."""
        return delete_guards.delete_empty_sessions(self.store, sessions_dir)

    def prune_empty_ghost_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete the TUI's empty, untitled sessions ended over a day ago."""
        return delete_guards.prune_empty_ghost_sessions(self.store, sessions_dir)

    def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: Path | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int:
        """Delete ended, unpinned sessions idle longer than the cutoff; return how many.

        ``filters`` are the agent's prune keywords (prune_filters: ``title_like``,
        ``max_tokens``, ``started_after`` …; an unknown one is a TypeError). A session the agent
        is using (open ledger work) is never deleted, whatever ``exclude_active_write_guards``
        says. With ``sessions_dir`` the transcript files of the deleted sessions go too.
        """
        return delete_guards.prune_sessions(
            self.store, older_than_days, source, sessions_dir, filters
        )

    def list_prune_candidates(
        self,
        older_than_days: float | None = None,
        source: str | None = None,
        *,
        whole_lineages: bool = False,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """Return the sessions a prune with these filters would consider, least active first.

        ``whole_lineages`` leaves out the compression ancestors a prune keeps because a later
        part of their conversation stays.
        """
        return prune.list_prune_candidates(
            self.store, older_than_days, source, whole_lineages=whole_lineages, **filters
        )

    def archive_sessions(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> int:
        """Archive the conversations a prune with these filters would match; return how many."""
        return prune.archive_sessions(self.store, older_than_days, source, **filters)

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: Path | None = None,
        min_vacuum_interval_days: int = 30,
        min_vacuum_freelist_ratio: float = auto_maintenance.MIN_FREELIST_RATIO,
    ) -> dict[str, Any]:
        """Prune old sessions at most once per interval, then VACUUM when worth it; never raises."""
        return auto_maintenance.maybe_prune_and_vacuum(
            self.store,
            lambda days, where: self.prune_sessions(days, sessions_dir=where),
            self.vacuum,
            retention_days=retention_days,
            min_interval_hours=min_interval_hours,
            vacuum=vacuum,
            sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio,
        )

    def prune(
        self,
        older_than_days: float = 90,
        *,
        source: str | None = None,
        dry_run: bool = False,
        now: float | None = None,
    ) -> prune.PruneResult:
        """Prune (or preview a prune of) idle ended sessions; return everything it found."""
        return prune.prune_sessions(
            self.store, older_than_days, source=source, dry_run=dry_run, now=now
        )

    def optimize(
        self, *, vacuum: bool = True, force: bool = False, rebuild_fts: bool = False
    ) -> reclaim.OptimizeResult:
        """Give space back (merge the indexes, VACUUM); return an OptimizeResult."""
        return reclaim.optimize(self.store, vacuum=vacuum, force=force, rebuild_fts=rebuild_fts)

    def vacuum(self) -> int:
        """Merge the search indexes and VACUUM; return how many indexes were merged."""
        return reclaim.vacuum(self.store)

    def optimize_fts(self) -> int:
        """Merge each search index's segments; return how many of the agent's two were merged.

        This package's CJK index is merged too; it is not counted (callers count the agent's).
        """
        merged = self.store.write(fts.optimize)
        return sum(1 for table in merged if table in fts.INDEX_TABLES)

    def rebuild_fts(self) -> int:
        """Rebuild the agent's search indexes from the messages; return how many."""
        return len(self.store.write(fts.rebuild_all))

    def get_meta(self, key: str) -> str | None:
        """Return a state_meta value, or None."""
        return meta.get(self.store.conn, key)

    def set_meta(self, key: str, value: str, *, cursor: sqlite3.Cursor | None = None) -> None:
        """Set a state_meta value (inside the caller's transaction when given its cursor)."""
        if cursor is not None:
            meta.put(cursor.connection, key, value)
            return
        self.store.write(lambda conn: meta.put(conn, key, value))
