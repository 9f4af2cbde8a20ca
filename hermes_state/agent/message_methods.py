"""SessionDB's message methods: append, read, rewind and search a session's messages."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from hermes_state.agent import rewind
from hermes_state.agent.handle import StoreHandle
from hermes_state.records import conversation, message_windows, messages as msg
from hermes_state.search import search
from hermes_state.shapes.rows import ConversationMessage, MessageRow


class MessageMethods(StoreHandle):
    """SessionDB's message methods, each a delegation to its concern."""

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
        _compressed_summary: bool = False,
        timestamp: float | None = None,
        api_content: str | None = None,
        display_kind: str | None = None,
        display_metadata: Mapping[str, Any] | None = None,
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
        message_uid: str | None = None,
        *,
        absorbed_message_uids: list[str] | None = None,
        tool_call_uids: Mapping[str, Any] | None = None,
        tool_call_uid: str | None = None,
    ) -> int:
        """Append one message; return its row id.

        The parameters are the agent's, in its order. ``_compressed_summary`` marks the row as
        a compression summary. ``compression_lock_holder``, ``turn_lease_holder`` and
        ``turn_lease_ttl_seconds`` are accepted so the agent's calls line up, and not checked:
        they are fences of the agent's own turn machinery, which this library does not run
        (its writes are serialised by SQLite transactions).
        """
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
            _compressed_summary=_compressed_summary,
        )

    def append_messages(self, session_id: str, batch: list[dict[str, Any]]) -> list[int]:
        """Append messages in one transaction; return their row ids."""
        return msg.append_messages(self.store, session_id, batch)

    def append_messages_batch(
        self,
        session_id: str,
        messages: list[Mapping[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Append messages in one transaction (or chunks of chunk_rows); return how many.

        The lock and lease parameters are the agent's turn fences, accepted so its calls line
        up and not checked (see append_message).
        """
        return msg.append_messages_batch(self.store, session_id, messages, chunk_rows)

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        reject_active_turn_lease: bool = False,
    ) -> None:
        """Replace a session's messages (archive_dropped: keep the dropped turns, taken back).

        ``reject_active_turn_lease`` is accepted so the agent's calls line up; its turn leases
        are the agent's own machinery, which this library does not run.
        """
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
        repair_alternation: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[ConversationMessage]:
        """Return a session's live messages as OpenAI-style dicts (see conversation).

        ``repair_alternation`` leaves out what a provider would reject (tool results without
        their call, calls that never got a result); the stored rows are not changed.
        """
        rows = conversation.get_messages_as_conversation(
            self.store,
            session_id,
            include_ancestors,
            include_inactive,
            repair_alternation,
            include_row_ids,
            include_compacted,
        )
        return cast("list[ConversationMessage]", rows)

    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return (what the model is sent, what the user is shown) when resuming a session."""
        return conversation.resume_conversations(self.store, session_id)

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """Return the messages of the sessions this one continues, oldest first."""
        return conversation.ancestor_display_prefix(self.store, session_id)

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Return the session to resume for an id (its conversation's latest messages)."""
        return conversation.resolve_resume_session_id(self.store, session_id)

    def get_conversation_root(self, session_id: str) -> str:
        """Return the first session of a session's conversation."""
        return conversation.conversation_root(self.store, session_id)

    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """Return the rows around one message, with how many lie on each side."""
        return message_windows.messages_around(self.store, session_id, around_message_id, window)

    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """Return the rows around a message and the session's opening and closing messages."""
        return message_windows.anchored_view(
            self.store, session_id, around_message_id, window, bookend, keep_roles
        )

    def has_archived_messages(self, session_id: str) -> bool:
        """Tell whether a session has rows outside its live generation."""
        return message_windows.has_archived_messages(self.store, session_id)

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Tell whether a session already stored this platform message."""
        return message_windows.has_platform_message_id(self.store, session_id, platform_message_id)

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: str) -> int:
        """Attach the provider-bound text to the newest live user row if it is that message."""
        return message_windows.set_latest_user_api_content(
            self.store, session_id, content, api_content
        )

    def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        expected_active_ids: list[int] | None = None,
    ) -> dict[str, Any]:
        """Take back a user message and everything after it (kept on disk, hidden)."""
        return rewind.rewind_to_message(
            self.store, session_id, target_message_id, expected_active_ids=expected_active_ids
        )

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Bring back rows taken back from since_message_id on."""
        return rewind.restore_rewound(self.store, session_id, since_message_id)

    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """Return a session's latest user prompts, newest first (for the rewind picker)."""
        return rewind.list_recent_user_messages(self.store, session_id, limit, include_inactive)

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
        fields: Collection[str] | None = None,
        after_ts: float | None = None,
        before_ts: float | None = None,
        *,
        complete: bool = False,
    ) -> search.SearchResult:
        """Search message text; the result list says which ordering and route were used.

        ``fields`` keeps only those keys of each hit; ``after_ts``/``before_ts`` (epoch
        seconds) keep messages written in [after, before); ``complete=True`` examines every
        candidate and ranks every match (no work budget).
        """
        result = search.search_messages(
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
        if fields is not None:
            keep = set(fields)
            result[:] = [{k: v for k, v in hit.items() if k in keep} for hit in result]
        return result

    def count_matches(self, query: str, **options: Any) -> search.MatchCount:
        """Count the messages a search would page through (under a time budget)."""
        return search.count_matches(self.store, query, **options)

    def message_window(
        self, session_id: str, around_id: int | None = None, **options: Any
    ) -> list[dict[str, Any]]:
        """Return the transcript messages around one message (or a session's first ones)."""
        return message_windows.message_window(self.store, session_id, around_id, **options)
