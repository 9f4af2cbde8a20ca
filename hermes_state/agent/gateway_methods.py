"""SessionDB's gateway methods: peers, routing, Telegram topic mode and handoffs."""

from __future__ import annotations

from typing import Any

from hermes_state.agent import gateway, handoff, telegram_topics
from hermes_state.agent.handle import StoreHandle


class GatewayMethods(StoreHandle):
    """SessionDB's gateway methods, each a delegation to its concern."""

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
