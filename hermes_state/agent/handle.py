"""What every part of SessionDB stands on: the open store and its queue of token counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_state.reports import usage
from hermes_state.store.connection import Store


class StoreHandle:
    """The state SessionDB's parts share (SessionDB.__init__ sets it)."""

    path: Path
    store: Store
    _token_queue: usage.TokenQueue

    @property
    def read_only(self) -> bool:
        """Whether writes are refused (read-only open, or a store of a schema we do not write)."""
        return self.store.read_only or self.store.too_new

    def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """Queue an update_token_counts call (written by flush_token_counts or close)."""
        self._token_queue.put(session_id, kwargs)

    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        """Write every queued token count; tell whether all were written (``timeout`` is the
        write patience; a store that stays busy longer keeps the rest queued)."""
        if not self._token_queue.items or self.read_only:
            return not self._token_queue.items
        return self._token_queue.flush(self.store)
