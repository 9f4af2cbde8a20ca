"""SessionDB's transfer methods: export records and the agent's all-or-nothing import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from hermes_state.agent import exports
from hermes_state.agent.handle import StoreHandle
from hermes_state.shapes import lineage
from hermes_state.shapes.rows import ImportSummary
from hermes_state.transfer import export as export_lib, import_batch
from hermes_state.vault import vault_import


class TransferMethods(StoreHandle):
    """SessionDB's transfer methods, each a delegation to its concern."""

    # --- export and import ---------------------------------------------------------------------

    def export_session(
        self, session_id: str, include_compacted: bool = False, include_inactive: bool = False
    ) -> dict[str, Any] | None:
        """Return one session with its "messages", or None.

        Live messages only unless asked: ``include_compacted`` adds the compression archive,
        ``include_inactive`` every generation (each row with its flags). ``sessions export`` of
        the CLI always writes every generation.
        """
        return exports.export_session(self.store, session_id, include_compacted, include_inactive)

    def export_all(
        self,
        source: str | None = None,
        include_compacted: bool = False,
        include_inactive: bool = False,
    ) -> list[dict[str, Any]]:
        """Return every session (of one source) with its messages, as export_session does."""
        return exports.export_all(self.store, source, include_compacted, include_inactive)

    def export_session_lineage(
        self, session_id: str, include_compacted: bool = False, include_inactive: bool = False
    ) -> dict[str, Any] | None:
        """Return a whole conversation as one record: the newest part's columns, every part's
        messages in order, ``segments`` and ``lineage_session_ids``."""
        return exports.export_session_lineage(
            self.store, session_id, include_compacted, include_inactive
        )

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
