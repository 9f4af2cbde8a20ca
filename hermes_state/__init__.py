"""hermes_state: the session store of Hermes Agent (schema, search, lineage, ledger, recovery).

Names are imported lazily so that `import hermes_state.home` (the CLI's start-up path) stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "SessionDB": "hermes_state.db",
    "open_store": "hermes_state.connection",
    "Store": "hermes_state.connection",
    "SCHEMA_VERSION": "hermes_state.schema",
    "get_hermes_home": "hermes_state.home",
    "display_hermes_home": "hermes_state.home",
    "set_hermes_home_override": "hermes_state.home",
    "reset_hermes_home_override": "hermes_state.home",
    "sanitize_fts5_query": "hermes_state.search",
    "search_messages": "hermes_state.search",
}
_ERRORS = (
    "HermesStateError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreCorruptError",
    "StoreReadOnlyError",
    "SchemaTooNewError",
    "SessionNotFoundError",
    "AmbiguousSessionIdError",
    "TitleInUseError",
    "InvalidTitleError",
    "LedgerBusyError",
    "StoreBusyError",
    "InvalidProfileNameError",
    "ProfileNotFoundError",
)
_LAZY.update(dict.fromkeys(_ERRORS, "hermes_state.errors"))
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_state' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
