"""SessionDB: the thin façade over one store; every method delegates to a concern module.

It answers the calls the seed document shows exactly as written there, and the agent's own
caller-facing methods with the agent's parameter order, defaults and return types (a count from
``prune_sessions``, a bool from ``set_session_title`` …). Richer results stay available under
their own names (``prune`` returns a PruneResult, ``search_messages`` a SearchResult list).
Opened writable, it is the agent's own store library: it creates and migrates the store as the
agent does (SPEC §19.4).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from hermes_state.agent import (
    auto_maintenance,
    compression,
    compression_state,
    gateway,
    handoff,
    repair,
    rewind,
    telegram_topics,
    transcripts,
    workspace,
)
from hermes_state.records import (
    conversation,
    ledger,
    listing,
    messages as msg,
    ownership,
    sessions as ses,
)
from hermes_state.reports import stats, usage
from hermes_state.search import query, search
from hermes_state.shapes import content, lineage
from hermes_state.shapes.rows import (
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
from hermes_state.store import cjk, fts, meta, schema
from hermes_state.store.connection import WRITE_PATIENCE_S, Store, open_store
from hermes_state.store.errors import (
    AmbiguousSessionIdError,
    SessionNotFoundError,
    StoreCorruptError,
)
from hermes_state.store.home import default_db_path
from hermes_state.transfer import export as export_lib, import_batch
from hermes_state.upkeep import deletion, prune, reclaim
from hermes_state.vault import vault_import

T = TypeVar("T")

# The last failure of a SessionDB() open in this process (the agent's /resume says why).
_last_init_error: str | None = None
_last_init_error_lock = threading.Lock()
# Errors after which a store is worth telling the user "may be on a network filesystem".
_WAL_INCOMPATIBLE = ("locking protocol", "not authorized")


def _set_last_init_error(message: str | None) -> None:
    """Record (or with None clear) why the last SessionDB() open of this process failed."""
    global _last_init_error
    with _last_init_error_lock:
        _last_init_error = message


def get_last_init_error() -> str | None:
    """Return why the last SessionDB() open of this process failed (None: none failed)."""
    return _last_init_error


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    """Say that the session store is unavailable, and why when an open failed."""
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    hint = ""
    if any(marker in cause.lower() for marker in _WAL_INCOMPATIBLE):
        hint = " (state.db may be on NFS/SMB/FUSE — see https://www.sqlite.org/wal.html)"
    return f"{prefix}: {cause}{hint}."


class SessionDBCorruptError(StoreCorruptError, sqlite3.DatabaseError):
    """The store is damaged (an sqlite3.DatabaseError too, as the agent's own class raises)."""


def _open(path: Path, read_only: bool) -> Store:
    """Open the store; a schema SQLite cannot load is healed once per process, then retried."""
    try:
        return open_store(path, read_only=read_only)
    except StoreCorruptError as exc:
        cause = exc.__cause__
        if (
            not read_only
            and isinstance(cause, sqlite3.DatabaseError)
            and repair.heal_on_open(path, cause)
        ):
            return open_store(path, read_only=read_only)
        raise SessionDBCorruptError(exc.message, hint=exc.hint) from cause


class SessionDB:
    """One profile's session store (default: get_hermes_home() / "state.db")."""

    MAX_TITLE_LENGTH = ses.MAX_TITLE_LENGTH
    # The agent's import limits (import_batch): one import holds the write lock throughout.
    _IMPORT_MAX_SESSIONS = import_batch.MAX_SESSIONS
    _IMPORT_MAX_MESSAGES_PER_SESSION = import_batch.MAX_MESSAGES_PER_SESSION
    _IMPORT_MAX_TOTAL_MESSAGES = import_batch.MAX_TOTAL_MESSAGES
    _IMPORT_MAX_SESSION_BYTES = import_batch.MAX_SESSION_BYTES
    _IMPORT_MAX_TOTAL_BYTES = import_batch.MAX_TOTAL_BYTES
    _FTS_TABLES = fts.INDEX_TABLES
    RECOVERABLE_END_REASONS = gateway.RECOVERABLE_END_REASONS

    def __init__(self, db_path: Path | str | None = None, *, read_only: bool = False) -> None:
        self.path = Path(db_path).expanduser() if db_path is not None else default_db_path()
        try:
            self.store: Store = _open(self.path, read_only)
        except Exception as exc:
            _set_last_init_error(f"{type(exc).__name__}: {exc}")
            raise
        self._token_queue = usage.TokenQueue()

    # --- what callers of the agent's class reach for directly ----------------------------------

    @property
    def db_path(self) -> Path:
        """The store file's path."""
        return self.path

    @property
    def _conn(self) -> sqlite3.Connection:
        """The store's own connection (autocommit, ``sqlite3.Row`` rows), as plugins use it."""
        return self.store.conn

    @property
    def _lock(self) -> threading.RLock:
        """The lock every write of this handle holds (hold it around direct ``_conn`` use)."""
        return self.store.lock

    @property
    def _fts_enabled(self) -> bool:
        """Whether the word index can be used on this connection."""
        return fts.usable(self.store.conn, fts.WORD_TABLE)

    @property
    def _trigram_available(self) -> bool:
        """Whether the substring index can be used on this connection."""
        return fts.usable(self.store.conn, fts.TRIGRAM_TABLE)

    def _fts_table_exists(self, name: str) -> bool:
        """Tell whether the store has a table of that name."""
        return self.store.has_table(name)

    def _execute_write(
        self, fn: Callable[[sqlite3.Connection], T], patience_s: float | None = None
    ) -> T:
        """Run fn(conn) in one write transaction, waiting out other writers (patience seconds)."""
        return self.store.write(fn, patience=WRITE_PATIENCE_S if patience_s is None else patience_s)

    def _get_session_rich_row(
        self, session_id: str, compact_rows: bool = False
    ) -> dict[str, Any] | None:
        """Return one session as a listing shows it (preview, last_active), or None."""
        return listing.rich_row(self.store, session_id, compact_rows)

    sanitize_title = staticmethod(ses.sanitize_title)
    _sanitize_fts5_query = staticmethod(query.sanitize_fts5_query)
    _contains_cjk = staticmethod(cjk.has_cjk)
    _count_cjk = staticmethod(cjk.count_cjk)
    _is_fts5_unavailable_error = staticmethod(fts.is_fts5_unavailable_error)
    _is_trigram_unavailable_error = staticmethod(fts.is_trigram_unavailable_error)
    _encode_content = staticmethod(content.encode_content)
    _decode_content = staticmethod(content.decode_content)
    _parse_schema_columns = staticmethod(schema.parse_schema_columns)

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
        """Set (or with None/empty clear) a session's title; False when there is no such session.

        Raises TitleInUseError (a ValueError) when another conversation holds the title.
        """
        try:
            ses.set_session_title(self.store, session_id, title)
        except SessionNotFoundError:
            return False
        return True

    def set_auto_title_if_empty(self, session_id: str, title: str) -> bool:
        """Set a generated title only while the session has none; tell whether it was set."""
        try:
            before = ses.get_session_title(self.store, session_id)
            if before is not None:
                return False
            got = ses.set_session_title(
                self.store, session_id, title, source="auto", only_if_empty=True
            )
        except SessionNotFoundError:
            return False
        return got is not None and got == ses.sanitize_title(title)

    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin or unpin a session; return False when no session has that id."""
        return ses.set_session_pinned(self.store, session_id, pinned)

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive a session; return False when no session has that id."""
        return ses.set_session_archived(self.store, session_id, archived)

    def get_session_title(self, session_id: str) -> str | None:
        """Return a session's title (None when untitled or unknown)."""
        try:
            return ses.get_session_title(self.store, session_id)
        except SessionNotFoundError:
            return None

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

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> int | None:
        """Record a session's working directory (branch and repo root only when known)."""
        return workspace.update_session_cwd(
            self.store, session_id, cwd, git_branch, git_repo_root, replace_git_meta
        )

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Return every directory sessions worked in, with how many and when last."""
        return workspace.distinct_session_cwds(self.store, include_archived)

    def backfill_repo_roots(self, cwd_to_root: dict[str, str]) -> None:
        """Fill the repository root of sessions in each directory that have none."""
        workspace.backfill_repo_roots(self.store, cwd_to_root)

    def update_session_model(
        self,
        session_id: str,
        model: str,
        provider: str | None = None,
        *,
        base_url: str | None = None,
        api_mode: str | None = None,
    ) -> None:
        """Set a session's model after a mid-session switch (and its route, with provider)."""
        self.flush_token_counts()  # a queued pre-switch report must not land after the switch
        usage.update_session_model(
            self.store, session_id, model, provider, base_url=base_url, api_mode=api_mode
        )

    def update_session_billing_route(
        self, session_id: str, *, provider: str, base_url: str, billing_mode: str | None = None
    ) -> None:
        """Set a session's billing route after a provider switch."""
        self.flush_token_counts()
        usage.update_session_billing_route(
            self.store, session_id, provider=provider, base_url=base_url, billing_mode=billing_mode
        )

    def update_session_meta(
        self, session_id: str, model_config_json: str, model: str | None = None
    ) -> None:
        """Replace a session's model_config (and its model, when given)."""
        ses.update_session_meta(self.store, session_id, model_config_json, model)

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """End a live (or accidentally ended) session as a deliberate reset."""
        return ses.promote_to_session_reset(self.store, session_id, reason)

    # --- the gateway's bookkeeping ------------------------------------------------------------

    def record_gateway_session_peer(
        self,
        session_id: str,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        display_name: str | None = None,
        origin_json: str | None = None,
        include_compression_ancestors: bool = False,
        transport_profile: str | None = None,
    ) -> None:
        """Record who a gateway session talks to (display name and origin never cleared)."""
        gateway.record_gateway_session_peer(
            self.store,
            session_id,
            source=source,
            user_id=user_id,
            session_key=session_key,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            display_name=display_name,
            origin_json=origin_json,
            include_compression_ancestors=include_compression_ancestors,
            transport_profile=transport_profile,
        )

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Mark (or unmark) a gateway session's expiry as handled."""
        gateway.set_expiry_finalized(self.store, session_id, finalized)

    def save_gateway_routing_entry(
        self, session_key: str, entry_json: str, *, scope: str = ""
    ) -> None:
        """Store one gateway routing entry."""
        gateway.save_gateway_routing_entry(self.store, session_key, entry_json, scope=scope)

    def replace_gateway_routing_entries(self, entries: dict[str, str], *, scope: str = "") -> None:
        """Replace every gateway routing entry of a scope."""
        gateway.replace_gateway_routing_entries(self.store, entries, scope=scope)

    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """Return the gateway routing entries of a scope."""
        return gateway.load_gateway_routing_entries(self.store, scope=scope)

    def delete_gateway_routing_entries(self, session_keys: list[str], *, scope: str = "") -> None:
        """Delete gateway routing entries."""
        gateway.delete_gateway_routing_entries(self.store, session_keys, scope=scope)

    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """Return the newest session of each gateway conversation key."""
        self.flush_token_counts()
        return gateway.list_gateway_sessions(self.store, platform=platform, active_only=active_only)

    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """Return the live session of a chat (and user, where several share it), or None."""
        return gateway.find_session_by_origin(
            self.store, platform=platform, chat_id=chat_id, thread_id=thread_id, user_id=user_id
        )

    def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any] | None:
        """Return the session a gateway should recover for a peer, or None."""
        return gateway.find_latest_gateway_session_for_peer(
            self.store,
            source=source,
            user_id=user_id,
            session_key=session_key,
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
        )

    # --- Telegram topic mode ---------------------------------------------------------------------

    def apply_telegram_topic_migration(self) -> None:
        """Create the Telegram topic tables (an explicit opt-in, never done on open)."""
        telegram_topics.apply_telegram_topic_migration(self.store)

    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = "default",
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turn topic mode on for a Telegram chat."""
        telegram_topics.enable_telegram_topic_mode(
            self.store,
            chat_id=chat_id,
            user_id=user_id,
            profile_name=profile_name,
            has_topics_enabled=has_topics_enabled,
            allows_users_to_create_topics=allows_users_to_create_topics,
        )

    def disable_telegram_topic_mode(
        self, *, chat_id: str, profile_name: str = "default", clear_bindings: bool = True
    ) -> None:
        """Turn topic mode off for a Telegram chat."""
        telegram_topics.disable_telegram_topic_mode(
            self.store, chat_id=chat_id, profile_name=profile_name, clear_bindings=clear_bindings
        )

    def is_telegram_topic_mode_enabled(
        self, *, chat_id: str, user_id: str, profile_name: str = "default"
    ) -> bool:
        """Tell whether topic mode is on for a Telegram chat and user."""
        return telegram_topics.is_telegram_topic_mode_enabled(
            self.store, chat_id=chat_id, user_id=user_id, profile_name=profile_name
        )

    def get_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = "default"
    ) -> dict[str, Any] | None:
        """Return the session bound to a Telegram topic, or None."""
        return telegram_topics.get_telegram_topic_binding(
            self.store, chat_id=chat_id, thread_id=thread_id, profile_name=profile_name
        )

    def list_telegram_topic_bindings_for_chat(
        self, *, chat_id: str, profile_name: str = "default"
    ) -> list[dict[str, Any]]:
        """Return every topic binding of a Telegram chat."""
        return telegram_topics.list_telegram_topic_bindings_for_chat(
            self.store, chat_id=chat_id, profile_name=profile_name
        )

    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """Return the Telegram topic a session is bound to, or None."""
        return telegram_topics.get_telegram_topic_binding_by_session(
            self.store, session_id=session_id
        )

    def delete_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = "default"
    ) -> int:
        """Remove a Telegram topic binding; return how many went."""
        return telegram_topics.delete_telegram_topic_binding(
            self.store, chat_id=chat_id, thread_id=thread_id, profile_name=profile_name
        )

    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
        profile_name: str = "default",
    ) -> None:
        """Bind a session to a Telegram topic (a session belongs to one topic only)."""
        telegram_topics.bind_telegram_topic(
            self.store,
            chat_id=chat_id,
            thread_id=thread_id,
            user_id=user_id,
            session_key=session_key,
            session_id=session_id,
            managed_mode=managed_mode,
            profile_name=profile_name,
        )

    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """Tell whether a session is bound to a Telegram topic."""
        return telegram_topics.is_telegram_session_linked_to_topic(
            self.store, session_id=session_id
        )

    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str, user_id: str, profile_name: str = "default", limit: int = 10
    ) -> list[dict[str, Any]]:
        """Return a user's Telegram sessions not bound to any topic, newest first."""
        return telegram_topics.list_unlinked_telegram_sessions_for_user(
            self.store, chat_id=chat_id, user_id=user_id, profile_name=profile_name, limit=limit
        )

    # --- handoff ---------------------------------------------------------------------------------

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Ask for a session's handoff to another platform."""
        return handoff.request_handoff(self.store, session_id, platform)

    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        """Return a session's handoff {state, platform, error}, or None."""
        return handoff.handoff_state(self.store, session_id)

    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        """Return the sessions waiting for a gateway to take their handoff."""
        return handoff.pending_handoffs(self.store)

    def claim_handoff(self, session_id: str) -> bool:
        """Take a pending handoff; tell whether this caller got it."""
        return handoff.claim_handoff(self.store, session_id)

    def complete_handoff(self, session_id: str) -> None:
        """Mark a handoff done."""
        handoff.complete_handoff(self.store, session_id)

    def fail_handoff(
        self, session_id: str, error: str, *, only_states: tuple[str, ...] | None = None
    ) -> bool:
        """Mark a handoff failed with its reason."""
        return handoff.fail_handoff(self.store, session_id, error, only_states=only_states)

    # --- compression bookkeeping -----------------------------------------------------------------

    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Claim a session's compression lock; False while another holder has a live one."""
        return compression_state.try_acquire_compression_lock(
            self.store, session_id, holder, ttl_seconds
        )

    def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = 300.0
    ) -> bool:
        """Extend a compression lock this holder still owns."""
        return compression_state.refresh_compression_lock(
            self.store, session_id, holder, ttl_seconds
        )

    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Release a compression lock this holder owns."""
        compression_state.release_compression_lock(self.store, session_id, holder)

    def get_compression_lock_holder(self, session_id: str) -> str | None:
        """Return who holds a session's live compression lock."""
        return compression_state.compression_lock_holder(self.store, session_id)

    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        """Hold off compressing a session until cooldown_until (it just failed)."""
        compression_state.record_failure_cooldown(self.store, session_id, cooldown_until, error)

    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        """Return a session's live compression cooldown, or None."""
        return compression_state.failure_cooldown(self.store, session_id)

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """Forget a session's compression cooldown."""
        compression_state.clear_failure_cooldown(self.store, session_id)

    def get_compression_fallback_streak(self, session_id: str) -> int:
        """Return how many compressions in a row fell back to the simple summary."""
        return compression_state.fallback_streak(self.store, session_id)

    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Record a session's compression fallback streak."""
        compression_state.set_fallback_streak(self.store, session_id, streak)

    def finalize_orphaned_compression_sessions(self) -> int:
        """End continuations a compression started but never used (a week on)."""
        return compression.finalize_orphaned_compression_sessions(self.store)

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
        usage.record_usage(
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
        return msg.messages_around(self.store, session_id, around_message_id, window)

    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """Return the rows around a message and the session's opening and closing messages."""
        return msg.anchored_view(
            self.store, session_id, around_message_id, window, bookend, keep_roles
        )

    def has_archived_messages(self, session_id: str) -> bool:
        """Tell whether a session has rows outside its live generation."""
        return msg.has_archived_messages(self.store, session_id)

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Tell whether a session already stored this platform message."""
        return msg.has_platform_message_id(self.store, session_id, platform_message_id)

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: str) -> int:
        """Attach the provider-bound text to the newest live user row if it is that message."""
        return msg.set_latest_user_api_content(self.store, session_id, content, api_content)

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
        return msg.message_window(self.store, session_id, around_id, **options)

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
        conn = self.store.conn
        if ses.get_session(self.store, session_id) is None:
            return False
        chain = (
            lineage.compression_lineage(self.store, session_id) if include_compression_chain else []
        )
        going = deletion.deletion_of(conn, [session_id, *chain])
        if expected_delete_ids is not None and set(expected_delete_ids) != set(going):
            return False
        if expected_display_messages is not None and any(
            msg.message_count(self.store, sid, live_only=True) != len(shown)
            for sid, shown in expected_display_messages.items()
        ):
            return False
        if exclude_active_write_guards and deletion.in_use(conn, going):
            return False
        try:
            deletion.delete_session(self.store, session_id, with_ids=chain)
        except SessionNotFoundError:
            return False
        transcripts.remove_session_files(sessions_dir, going)
        return True

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
        ids = list(session_ids)
        if include_compression_chain:
            ids += [
                other
                for sid in session_ids
                if isinstance(sid, str)
                for other in lineage.compression_lineage(self.store, sid)
            ]
        if exclude_active_write_guards:
            busy = set(deletion.in_use(self.store.conn, [s for s in ids if isinstance(s, str)]))
            if skipped_ids is not None:
                skipped_ids.extend(sorted(busy))
            ids = [s for s in ids if s not in busy]
        gone = deletion.delete_sessions(self.store, ids, skipped=skipped_ids)
        transcripts.remove_session_files(sessions_dir, gone)
        return len(gone)

    def delete_session_if_empty(self, session_id: str, sessions_dir: Path | None = None) -> bool:
        """Delete a session that never got a message, title or child; tell whether it went."""
        gone = deletion.delete_session_if_empty(self.store, session_id)
        if gone:
            transcripts.remove_session_files(sessions_dir, [session_id])
        return gone

    def count_empty_sessions(self) -> int:
        """Count the ended, unarchived sessions without any message."""
        return deletion.count_empty_sessions(self.store)

    def delete_empty_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete every ended, unarchived, unpinned empty session; return how many went."""
        gone = deletion.delete_empty_sessions(self.store)
        transcripts.remove_session_files(sessions_dir, gone)
        return len(gone)

    def prune_empty_ghost_sessions(self, sessions_dir: Path | None = None) -> int:
        """Delete the TUI's empty, untitled sessions ended over a day ago."""
        gone = prune.prune_empty_ghost_sessions(self.store)
        transcripts.remove_session_files(sessions_dir, gone)
        return len(gone)

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
        result = prune.prune_sessions(self.store, older_than_days, source=source, filters=filters)
        transcripts.remove_session_files(sessions_dir, result.session_ids)
        return result.sessions

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

    # --- export and import ---------------------------------------------------------------------

    def export_session(
        self, session_id: str, include_compacted: bool = False, include_inactive: bool = False
    ) -> dict[str, Any] | None:
        """Return one session with its "messages", or None.

        Live messages only unless asked: ``include_compacted`` adds the compression archive,
        ``include_inactive`` every generation (each row with its flags). ``sessions export`` of
        the CLI always writes every generation.
        """
        if ses.get_session(self.store, session_id) is None:
            return None
        record = export_lib.export_session(self.store, session_id)
        record["messages"] = export_lib.live_messages(
            record["messages"],
            include_compacted=include_compacted,
            include_inactive=include_inactive,
        )
        return record

    def export_all(
        self,
        source: str | None = None,
        include_compacted: bool = False,
        include_inactive: bool = False,
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
            for record in export_lib.export_all(self.store, source=source)
        ]

    def export_session_lineage(
        self, session_id: str, include_compacted: bool = False, include_inactive: bool = False
    ) -> dict[str, Any] | None:
        """Return a whole conversation as one record: the newest part's columns, every part's
        messages in order, ``segments`` and ``lineage_session_ids``."""
        parts = [
            p
            for p in (
                self.export_session(sid, include_compacted, include_inactive)
                for sid in lineage.compression_lineage(self.store, session_id)
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

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """Return a session's whole conversation, root first (each session once)."""
        return lineage.compression_lineage(self.store, session_id)

    def iter_export_all(self, source: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield export records one at a time, messages lazily (memory stays flat)."""
        return export_lib.export_all(self.store, source=source)

    def import_sessions(
        self, sessions: list[dict[str, Any]], *, on_conflict: str = "skip"
    ) -> ImportSummary:
        """Import exported sessions all or nothing, as the agent does (see import_batch).

        Returns ``ok``, ``imported``, ``skipped``, ``replaced``, ``detached``, ``imported_ids``,
        ``skipped_ids``, ``messages``, ``errors`` and ``warnings``.
        """
        # A session in the profile's vault is present: skipped, never made a second time.
        others = vault_import.other_stores(self.store)
        return cast(
            "ImportSummary",
            import_batch.import_list(self.store, sessions, on_conflict=on_conflict, others=others),
        )

    # --- compression generations and ownership -------------------------------------------------

    def archive_and_compact(self, session_id: str, compacted_messages: list[dict[str, Any]]) -> int:
        """Compact a session in place; return how many live rows it has now."""
        return compression.archive_and_compact(self.store, session_id, compacted_messages)

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
