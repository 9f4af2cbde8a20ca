"""SessionDB: the thin façade over one store; every method delegates to a concern module.

Its methods are written in parts by concern (``*_methods.py`` beside this module: sessions,
gateway, compression, ledger, listing, usage, messages, upkeep, transfer), each a delegation;
this module opens the store and holds what callers reach for directly.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hermes_state.agent import gateway, repair
from hermes_state.agent.compression_methods import CompressionMethods
from hermes_state.agent.gateway_methods import GatewayMethods
from hermes_state.agent.ledger_methods import LedgerMethods
from hermes_state.agent.listing_methods import ListingMethods
from hermes_state.agent.message_methods import MessageMethods
from hermes_state.agent.session_methods import SessionMethods
from hermes_state.agent.transfer_methods import TransferMethods
from hermes_state.agent.upkeep_methods import UpkeepMethods
from hermes_state.agent.usage_methods import UsageMethods
from hermes_state.records import listing, sessions as ses
from hermes_state.reports import usage
from hermes_state.search import query
from hermes_state.shapes import content
from hermes_state.store import cjk, fts, schema
from hermes_state.store.connection import Store, open_store
from hermes_state.store.errors import StoreCorruptError
from hermes_state.store.home import default_db_path
from hermes_state.store.patience import WRITE_PATIENCE_S
from hermes_state.transfer import import_batch

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


class SessionDB(
    SessionMethods,
    GatewayMethods,
    CompressionMethods,
    LedgerMethods,
    ListingMethods,
    UsageMethods,
    MessageMethods,
    UpkeepMethods,
    TransferMethods,
):
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
            self.store = _open(self.path, read_only)
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

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Write queued token counts, then close the store (a writable handle checkpoints)."""
        if self._token_queue.items and not self.read_only:
            self._token_queue.flush(self.store)
        self.store.close()
