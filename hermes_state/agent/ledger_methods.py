"""SessionDB's runtime ledger methods: owner epochs, admissions, executions, receipts."""

from __future__ import annotations

from typing import Any

from hermes_state.agent.handle import StoreHandle
from hermes_state.records import ledger


class LedgerMethods(StoreHandle):
    """SessionDB's runtime ledger methods, each a delegation to its concern."""

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
