"""SessionDB: the thin façade over one store; every method delegates to a concern module.

It answers the calls the seed document shows exactly as written there, and the agent's own
caller-facing methods with the agent's parameter order, defaults and return types (a count from
``prune_sessions``, a bool from ``set_session_title`` …). Richer results stay available under
their own names (``prune`` returns a PruneResult, ``search_messages`` a SearchResult list).
Opened writable, it is the agent's own store library: it creates and migrates the store as the
agent does (SPEC §19.4).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from hermes_state import (
    compression,
    ledger,
    listing,
    maintenance,
    messages as msg,
    meta,
    ownership,
    portability,
    search,
    sessions as ses,
    stats,
    usage,
)
from hermes_state.connection import Store, open_store
from hermes_state.errors import AmbiguousSessionIdError
from hermes_state.home import default_db_path
from hermes_state.rows import (
    ConversationMessage,
    ImportSummary,
    ListOrder,
    MessageRow,
    ModelUsage,
    SessionRow,
    SourceCount,
    StoreStats,
    UsageTotals,
)


class SessionDB:
    """One profile's session store (default: get_hermes_home() / "state.db")."""

    def __init__(self, db_path: Path | str | None = None, *, read_only: bool = False) -> None:
        self.path = Path(db_path).expanduser() if db_path is not None else default_db_path()
        self.store: Store = open_store(self.path, read_only=read_only)
        self._token_queue = usage.TokenQueue()

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (read-only open, or a store of a schema we do not write)."""
        return self.store.read_only or self.store.too_new

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Write queued token counts, then close the store (a writable handle checkpoints)."""
        if self._token_queue.items and not self.read_only:
            self._token_queue.flush(self.store)
        self.store.close()

    # --- sessions ------------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Mapping[str, Any] | str | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
        cwd: str | None = None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        profile_name: str | None = None,
        transport_profile: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
    ) -> str:
        """Create a session, or fill in what an earlier writer left empty; return its id."""
        return ses.create_session(
            self.store,
            session_id,
            source,
            started_at=started_at,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            parent_session_id=parent_session_id,
            session_key=session_key,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            display_name=display_name,
            origin_json=origin_json,
            cwd=cwd,
            git_branch=git_branch,
            git_repo_root=git_repo_root,
            profile_name=profile_name,
            transport_profile=transport_profile,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
        )

    def ensure_session(
        self,
        session_id: str,
        source: str = "unknown",
        model: str | None = None,
        *,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        system_prompt: str | None = None,
    ) -> str:
        """Make sure a session row exists (an upsert that only fills what is still empty)."""
        return ses.ensure_session(
            self.store,
            session_id,
            source,
            model,
            user_id=user_id,
            parent_session_id=parent_session_id,
            system_prompt=system_prompt,
        )

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> None:
        """End a session (the first end wins)."""
        ses.end_session(self.store, session_id, end_reason, ended_at=ended_at)

    def reopen_session(self, session_id: str) -> None:
        """Clear a session's end."""
        ses.reopen_session(self.store, session_id)

    def get_session(self, session_id: str) -> SessionRow | None:
        """Return one session's columns, or None."""
        return cast("SessionRow | None", ses.get_session(self.store, session_id))

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """Return the id equal to, or uniquely prefixed by, the text (None when ambiguous)."""
        try:
            return ses.resolve_session_id(self.store, session_id_or_prefix)
        except AmbiguousSessionIdError:
            return None

    def find_session(self, ref: str) -> str:
        """Resolve an id, unique prefix or title, or raise SessionNotFoundError."""
        return ses.find_session(self.store, ref)

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or with None/empty clear) a session's title; tell whether one is now set."""
        return ses.set_session_title(self.store, session_id, title) is not None

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin a session; return False when no session has that id."""
        return ses.set_session_pinned(self.store, session_id, pinned)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive a session; return False when no session has that id."""
        return ses.set_session_archived(self.store, session_id, archived)

    def get_session_title(self, session_id: str) -> str | None:
        """Return a session's title."""
        return ses.get_session_title(self.store, session_id)

    def get_session_by_title(self, title: str) -> SessionRow | None:
        """Return the session whose title is exactly this one, or None."""
        return cast("SessionRow | None", ses.get_session_by_title(self.store, title))

    def resolve_session_by_title(self, title: str) -> str | None:
        """Return the newest session of a title's lineage (for resuming, not for destroying)."""
        return ses.resolve_session_by_title(self.store, title)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        """Return the next numbered title of a lineage ("T #2", …)."""
        return ses.get_next_title_in_lineage(self.store, base_title)

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Store a session's assembled system prompt."""
        ses.update_system_prompt(self.store, session_id, system_prompt)

    def get_lineage(self, session_id: str) -> list[SessionRow]:
        """Return a session's ancestors, root first, ending with the session."""
        return cast("list[SessionRow]", ses.get_lineage(self.store, session_id))

    def get_descendants(self, session_id: str) -> list[SessionRow]:
        """Return every session descending from this one."""
        return cast("list[SessionRow]", ses.get_descendants(self.store, session_id))

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
        rows = ses.list_sessions(
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

    # --- usage ---------------------------------------------------------------------------------

    def record_usage(
        self,
        session_id: str,
        model: str,
        *,
        task: str = "",
        billing_provider: str = "",
        billing_base_url: str = "",
        billing_mode: str = "",
        estimated_cost_usd: float = 0.0,
        actual_cost_usd: float | None = None,
        at: float | None = None,
        api_call_count: int = 1,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        """Add one API call's tokens and cost to a session and its per-model usage row."""
        ses.record_usage(
            self.store,
            session_id,
            model,
            task=task,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
            estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd,
            at=at,
            api_call_count=api_call_count,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
        )

    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
        source: str | None = None,
        task: str = "",
    ) -> None:
        """Add one call's tokens and cost (or, with absolute=True, set the session's totals)."""
        usage.update_token_counts(
            self.store,
            session_id,
            input_tokens,
            output_tokens,
            model,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
            estimated_cost_usd,
            actual_cost_usd,
            cost_status,
            cost_source,
            pricing_version,
            billing_provider,
            billing_base_url,
            billing_mode,
            api_call_count,
            absolute,
            source,
            task,
        )

    def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """Queue an update_token_counts call (written by flush_token_counts or close)."""
        self._token_queue.put(session_id, kwargs)

    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        """Write every queued token count; tell whether all were written (``timeout`` is the
        write patience; a store that stays busy longer keeps the rest queued)."""
        if not self._token_queue.items or self.read_only:
            return not self._token_queue.items
        return self._token_queue.flush(self.store)

    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_call_count: int = 1,
    ) -> None:
        """Record a side task's usage (title generation, compression, …) under its task name."""
        usage.record_auxiliary_usage(
            self.store,
            session_id,
            task,
            model=model,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd,
            api_call_count=api_call_count,
        )

    def usage_totals(
        self, *, min_message_count: int = 1, include_archived: bool = False
    ) -> UsageTotals:
        """Return tokens and spend over the store's root ses."""
        self.flush_token_counts()
        totals = usage.usage_totals(
            self.store, min_message_count=min_message_count, include_archived=include_archived
        )
        return {"tokens": int(totals["tokens"]), "cost_usd": float(totals["cost_usd"])}

    def usage_by_model(self) -> list[ModelUsage]:
        """Return tokens and cost per model."""
        return cast("list[ModelUsage]", stats.usage_by_model(self.store))

    def top_sessions_by_tokens(self, n: int = 10) -> list[SessionRow]:
        """Return the sessions that used the most tokens."""
        return cast("list[SessionRow]", stats.top_sessions_by_tokens(self.store, n))

    def counts_by_source(self) -> list[SourceCount]:
        """Return session and message counts per source."""
        return cast("list[SourceCount]", stats.counts_by_source(self.store))

    def store_stats(self) -> StoreStats:
        """Return file sizes, page counts and row counts."""
        return cast("StoreStats", stats.store_stats(self.store))

    # --- messages ------------------------------------------------------------------------------

    def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        effect_disposition: str | None = None,
        timestamp: float | None = None,
        api_content: str | None = None,
        display_kind: str | None = None,
        display_metadata: Mapping[str, Any] | None = None,
        message_uid: str | None = None,
        *,
        absorbed_message_uids: list[str] | None = None,
        tool_call_uids: Mapping[str, Any] | None = None,
        tool_call_uid: str | None = None,
    ) -> int:
        """Append one message; return its row id."""
        return msg.append_message(
            self.store,
            session_id,
            role,
            content,
            tool_name=tool_name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            token_count=token_count,
            finish_reason=finish_reason,
            reasoning=reasoning,
            reasoning_content=reasoning_content,
            reasoning_details=reasoning_details,
            codex_reasoning_items=codex_reasoning_items,
            codex_message_items=codex_message_items,
            platform_message_id=platform_message_id,
            observed=observed,
            effect_disposition=effect_disposition,
            timestamp=timestamp,
            api_content=api_content,
            display_kind=display_kind,
            display_metadata=display_metadata,
            message_uid=message_uid,
            absorbed_message_uids=absorbed_message_uids,
            tool_call_uids=tool_call_uids,
            tool_call_uid=tool_call_uid,
        )

    def append_messages(self, session_id: str, batch: list[dict[str, Any]]) -> list[int]:
        """Append messages in one transaction; return their row ids."""
        return msg.append_messages(self.store, session_id, batch)

    def append_messages_batch(
        self, session_id: str, messages: list[Mapping[str, Any]], chunk_rows: int | None = None
    ) -> int:
        """Append messages in one transaction (or chunks of chunk_rows); return how many."""
        return msg.append_messages_batch(self.store, session_id, messages, chunk_rows)

    def replace_messages(
        self,
        session_id: str,
        messages: list[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
    ) -> None:
        """Replace a session's messages (archive_dropped: keep the dropped turns, taken back)."""
        msg.replace_messages(self.store, session_id, messages, active_only, archive_dropped)

    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        include_compacted: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
        include_ancestors: bool = False,
    ) -> list[MessageRow]:
        """Return a session's messages in id order (live rows unless asked for more)."""
        rows = msg.get_messages(
            self.store,
            session_id,
            include_inactive,
            include_compacted,
            limit,
            offset,
            latest,
            after_id,
            include_ancestors,
        )
        return cast("list[MessageRow]", rows)

    def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[ConversationMessage]:
        """Return a session's live messages as OpenAI-style dicts."""
        rows = msg.get_messages_as_conversation(
            self.store,
            session_id,
            include_ancestors,
            include_inactive,
            include_row_ids,
            include_compacted,
        )
        return cast("list[ConversationMessage]", rows)

    def message_count(self, session_id: str | None = None) -> int:
        """Count the messages of one session, or of the whole store."""
        return msg.message_count(self.store, session_id)

    def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        *,
        after_ts: float | None = None,
        before_ts: float | None = None,
        complete: bool = False,
    ) -> search.SearchResult:
        """Search message text; the result list says which ordering and route were used.

        ``after_ts``/``before_ts`` (epoch seconds) keep messages written in [after, before);
        ``complete=True`` examines every candidate and ranks every match (no work budget).
        """
        return search.search_messages(
            self.store,
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort or "rank",
            include_inactive=include_inactive,
            after=after_ts,
            before=before_ts,
            complete=complete,
        )

    def count_matches(self, query: str, **options: Any) -> search.MatchCount:
        """Count the messages a search would page through (under a time budget)."""
        return search.count_matches(self.store, query, **options)

    def message_window(
        self, session_id: str, around_id: int | None = None, **options: Any
    ) -> list[dict[str, Any]]:
        """Return the transcript messages around one message (or a session's first ones)."""
        return msg.message_window(self.store, session_id, around_id, **options)

    # --- maintenance ---------------------------------------------------------------------------

    def clear_messages(self, session_id: str) -> None:
        """Delete a session's messages, keeping the session."""
        maintenance.clear_messages(self.store, session_id)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session and its messages (refused while its ledger work is open)."""
        maintenance.delete_session(self.store, session_id)
        return True

    def prune_sessions(self, older_than_days: float = 90, source: str | None = None) -> int:
        """Delete ended, unpinned sessions idle longer than the cutoff; return how many."""
        return self.prune(older_than_days, source=source).sessions

    def prune(
        self,
        older_than_days: float = 90,
        *,
        source: str | None = None,
        dry_run: bool = False,
        now: float | None = None,
    ) -> maintenance.PruneResult:
        """Prune (or preview a prune of) idle ended sessions; return everything it found."""
        return maintenance.prune_sessions(
            self.store, older_than_days, source=source, dry_run=dry_run, now=now
        )

    def optimize(
        self, *, vacuum: bool = True, force: bool = False, rebuild_fts: bool = False
    ) -> maintenance.OptimizeResult:
        """Give space back (merge the indexes, VACUUM); return an OptimizeResult."""
        return maintenance.optimize(self.store, vacuum=vacuum, force=force, rebuild_fts=rebuild_fts)

    def vacuum(self) -> int:
        """Merge the search indexes and VACUUM; return how many indexes were merged."""
        return maintenance.vacuum(self.store)

    def get_meta(self, key: str) -> str | None:
        """Return a state_meta value, or None."""
        return meta.get(self.store.conn, key)

    def set_meta(self, key: str, value: str) -> None:
        """Set a state_meta value."""
        self.store.write(lambda conn: meta.put(conn, key, value))

    # --- export and import ---------------------------------------------------------------------

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        """Return one session with its "messages" (every row, flags included), or None."""
        if ses.get_session(self.store, session_id) is None:
            return None
        return portability.export_session(self.store, session_id)

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Return every session (of one source) with its messages, as a list of dicts."""
        return [
            {**record, "messages": list(record["messages"])}
            for record in portability.export_all(self.store, source=source)
        ]

    def iter_export_all(self, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield export records one at a time, messages lazily (memory stays flat)."""
        return portability.export_all(self.store, source=source)

    def import_sessions(
        self, sessions: list[dict[str, Any]], *, on_conflict: str = "skip"
    ) -> ImportSummary:
        """Import export records (each session all or nothing); return what happened."""
        result = portability.import_sessions(self.store, sessions, on_conflict=on_conflict)
        return {
            "imported": result.imported,
            "skipped": result.skipped,
            "replaced": result.replaced,
            "messages": result.messages,
            "errors": [vars(e) for e in result.errors],
            "warnings": list(result.warnings),
        }

    # --- compression generations and ownership -------------------------------------------------

    def compact_session(
        self, session_id: str, kept_messages: list[dict[str, Any]]
    ) -> compression.CompactionResult:
        """Archive the live generation and insert the retained context as the new one."""
        return compression.compact_session(self.store, session_id, kept_messages)

    def rotate_session(
        self,
        old_id: str,
        new_id: str,
        *,
        kept_messages: Sequence[Mapping[str, Any]] = (),
        started_at: float | None = None,
    ) -> compression.RotationResult:
        """Continue a session in a child and end it with end_reason='compression'."""
        return compression.rotate_session(
            self.store, old_id, new_id, kept_messages=kept_messages, started_at=started_at
        )

    def compression_successor(self, session_id: str) -> str | None:
        """Return the child continuing a session ended by compression."""
        return compression.compression_successor(self.store, session_id)

    def compression_ancestors(self, session_id: str) -> list[str]:
        """Return the sessions this one continues, nearest first."""
        return compression.compression_ancestors(self.store, session_id)

    def compression_tip(self, session_id: str) -> str:
        """Return the live end of a session's compression chain."""
        return compression.compression_tip(self.store, session_id)

    def get_compression_tip(self, session_id: str) -> str | None:
        """Return the live end of a session's compression chain (the session itself if none)."""
        return compression.compression_tip(self.store, session_id)

    def get_compression_chain(self, session_id: str) -> list[str]:
        """Return the session and its compression continuations, through the live tip."""
        return compression.compression_chain(self.store, session_id)

    def find_owned_input(
        self, session_id: str, marker: Mapping[str, Any], *, writer: str | None = None
    ) -> ownership.OwnedInput | None:
        """Find the row that already holds an input marker (the exception-path lookup)."""
        return ownership.find_owned_input(self.store, session_id, marker, writer=writer)

    # --- runtime ledger ------------------------------------------------------------------------

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
