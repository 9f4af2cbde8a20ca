"""SessionDB's compression methods: locks, cooldowns, generations, chains, ownership."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hermes_state.agent import compression, compression_state
from hermes_state.agent.handle import StoreHandle
from hermes_state.records import ownership


class CompressionMethods(StoreHandle):
    """SessionDB's compression methods, each a delegation to its concern."""

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
