"""hermes_state: the session store of Hermes Agent (schema, search, lineage, ledger, recovery).

Names are imported lazily so that `import hermes_state.home` (the CLI's start-up path) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the real types for type checkers; at run time the names load lazily
    from hermes_state.connection import (
        Store as Store,
        open_store as open_store,
    )
    from hermes_state.db import (
        SessionDB as SessionDB,
    )
    from hermes_state.errors import (
        AmbiguousSessionIdError as AmbiguousSessionIdError,
        HermesStateError as HermesStateError,
        InvalidProfileNameError as InvalidProfileNameError,
        InvalidTitleError as InvalidTitleError,
        LedgerBusyError as LedgerBusyError,
        NotAHermesStoreError as NotAHermesStoreError,
        ProfileNotFoundError as ProfileNotFoundError,
        SchemaTooNewError as SchemaTooNewError,
        SessionNotFoundError as SessionNotFoundError,
        StoreBusyError as StoreBusyError,
        StoreCorruptError as StoreCorruptError,
        StoreLockedError as StoreLockedError,
        StoreNeedsMigrationError as StoreNeedsMigrationError,
        StoreNotFoundError as StoreNotFoundError,
        StoreReadOnlyError as StoreReadOnlyError,
        TitleInUseError as TitleInUseError,
        UnknownSchemaError as UnknownSchemaError,
    )
    from hermes_state.home import (
        display_hermes_home as display_hermes_home,
        get_hermes_home as get_hermes_home,
        reset_hermes_home_override as reset_hermes_home_override,
        set_hermes_home_override as set_hermes_home_override,
    )
    from hermes_state.schema import (
        SCHEMA_VERSION as SCHEMA_VERSION,
    )
    from hermes_state.search import (
        SearchResult as SearchResult,
        sanitize_fts5_query as sanitize_fts5_query,
        search_messages as search_messages,
    )

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
    "SearchResult": "hermes_state.search",
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
    "UnknownSchemaError",
    "NotAHermesStoreError",
    "StoreNeedsMigrationError",
)
_LAZY.update(dict.fromkeys(_ERRORS, "hermes_state.errors"))
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_state' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
