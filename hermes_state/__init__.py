"""hermes_state: the session store of Hermes Agent (schema, search, lineage, ledger, recovery).

Names are imported lazily so that `import hermes_state.store.home` (the CLI's start-up path) stays
cheap.
The module-level names the agent's own ``hermes_state`` offers its callers and plugins exist here
with the same meaning (``SCHEMA_SQL``, ``DEFAULT_DB_PATH``, ``apply_wal_with_fallback``,
``repair_state_db_schema`` …), as do the standard modules it exposes (``hermes_state.sqlite3``,
``hermes_state.time``), which callers patch in tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the real types for type checkers; at run time the names load lazily
    from hermes_state.agent.db import (
        SessionDB as SessionDB,
    )
    from hermes_state.search.search import (
        SearchResult as SearchResult,
        sanitize_fts5_query as sanitize_fts5_query,
        search_messages as search_messages,
    )
    from hermes_state.store.connection import (
        Store as Store,
        open_store as open_store,
    )
    from hermes_state.store.errors import (
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
    from hermes_state.store.home import (
        display_hermes_home as display_hermes_home,
        get_hermes_home as get_hermes_home,
        reset_hermes_home_override as reset_hermes_home_override,
        set_hermes_home_override as set_hermes_home_override,
    )
    from hermes_state.store.schema import (
        SCHEMA_VERSION as SCHEMA_VERSION,
    )

_LAZY = {
    "SessionDB": "hermes_state.agent.db",
    "AsyncSessionDB": "hermes_state.agent.async_db",
    "get_last_init_error": "hermes_state.agent.db",
    "format_session_db_unavailable": "hermes_state.agent.db",
    "SCHEMA_SQL": "hermes_state.store.schema",
    "FTS_SQL": "hermes_state.store.fts",
    "FTS_TRIGRAM_SQL": "hermes_state.store.fts",
    "MAX_FTS5_QUERY_CHARS": "hermes_state.search.query",
    "workspace_key": "hermes_state.agent.workspace",
    "apply_wal_with_fallback": "hermes_state.store.journal",
    "is_malformed_db_error": "hermes_state.agent.repair",
    "repair_state_db_schema": "hermes_state.agent.repair",
    "_db_opens_cleanly": "hermes_state.agent.repair",
    "_repair_attempted_paths": "hermes_state.agent.repair",
    "open_store": "hermes_state.store.connection",
    "Store": "hermes_state.store.connection",
    "SCHEMA_VERSION": "hermes_state.store.schema",
    "get_hermes_home": "hermes_state.store.home",
    "display_hermes_home": "hermes_state.store.home",
    "set_hermes_home_override": "hermes_state.store.home",
    "reset_hermes_home_override": "hermes_state.store.home",
    "sanitize_fts5_query": "hermes_state.search.search",
    "search_messages": "hermes_state.search.search",
    "SearchResult": "hermes_state.search.search",
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
_LAZY.update(dict.fromkeys(_ERRORS, "hermes_state.store.errors"))
# Names whose object has another name in its module.
_ALIASES = {
    "_db_opens_cleanly": "db_opens_cleanly",
    "_repair_attempted_paths": "attempted_paths",
    "MAX_FTS5_QUERY_CHARS": "MAX_QUERY_CHARS",
}
__all__ = sorted(_LAZY)


# Standard modules the agent's module exposes as attributes (callers patch hermes_state.time.time).
_MODULES = frozenset({"sqlite3", "sys", "time", "json", "re", "threading", "logging", "random"})


def __getattr__(name: str) -> Any:
    import importlib

    if name in _MODULES:
        return importlib.import_module(name)
    if name == "DEFAULT_DB_PATH":  # resolved at each use: the home may change (SPEC §2)
        from hermes_state.store.home import default_db_path

        return default_db_path()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_state' has no attribute {name!r}")
    return getattr(importlib.import_module(module), _ALIASES.get(name, name))
