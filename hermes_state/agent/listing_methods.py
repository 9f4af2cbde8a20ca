"""SessionDB's listing methods: pages of sessions and counts, as the agent's pickers ask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from hermes_state.agent.handle import StoreHandle
from hermes_state.records import listing, session_list
from hermes_state.shapes.rows import ListOrder, SessionRow


class ListingMethods(StoreHandle):
    """SessionDB's listing methods, each a delegation to its concern."""

    # --- listings and counts ---------------------------------------------------------------------

    def list_sessions(
        self,
        *,
        sources: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_archived: bool = False,
        order: ListOrder = "started",
        started_after: float | None = None,
        started_before: float | None = None,
        archived_only: bool = False,
        pinned_only: bool = False,
        active_since: float | None = None,
    ) -> list[SessionRow]:
        """Return one page of sessions with preview and last_active (started in [after, before))."""
        rows = session_list.list_sessions(
            self.store,
            sources=sources,
            exclude_sources=exclude_sources,
            limit=limit,
            offset=offset,
            include_archived=include_archived,
            order=order,
            started_after=started_after,
            started_before=started_before,
            archived_only=archived_only,
            pinned_only=pinned_only,
            active_since=active_since,
        )
        return cast("list[SessionRow]", rows)

    def list_sessions_rich(
        self,
        source: str | None = None,
        sources: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
        session_key: str | None = None,
        include_hidden: bool = False,
        include_subagents: bool = False,
    ) -> list[SessionRow]:
        """List sessions with preview and last_active, as the agent's pickers show them."""
        self.flush_token_counts()  # rows carry token totals
        rows = listing.list_sessions_rich(
            self.store,
            source,
            sources,
            exclude_sources,
            cwd_prefix,
            limit,
            offset,
            include_children,
            min_message_count,
            project_compression_tips,
            order_by_last_active,
            include_archived,
            archived_only,
            id_query,
            search_query,
            compact_rows,
            include_pinned,
            session_key,
            include_hidden,
            include_subagents,
        )
        return cast("list[SessionRow]", rows)

    def search_sessions(
        self,
        source: str | Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[SessionRow]:
        """Return sessions most recently active first (optionally of one workspace)."""
        return cast(
            "list[SessionRow]",
            listing.search_sessions(self.store, source, limit, offset, workspace_key),
        )

    def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: list[str] | None = None,
        exclude_sources: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Find conversations by session id (exact first, then prefix, then substring)."""
        return listing.search_sessions_by_id(
            self.store, query, limit, include_archived, source, sources, exclude_sources
        )

    def list_cron_job_runs(
        self, job_id: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Return one cron job's runs, newest first, with preview and last_active."""
        return listing.list_cron_job_runs(self.store, job_id, limit, offset)

    def session_count(
        self,
        source: str | None = None,
        sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: list[str] | None = None,
        include_subagents: bool = False,
    ) -> int:
        """Count the sessions a listing with the same filters pages through."""
        return listing.session_count(
            self.store,
            source,
            sources,
            cwd_prefix,
            min_message_count,
            include_archived,
            archived_only,
            exclude_children,
            exclude_sources,
            include_subagents,
        )

    def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        """Return {source: sessions}, largest first."""
        return listing.session_count_by_source(
            self.store,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
        )
