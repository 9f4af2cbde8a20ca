"""Typed errors of the session store, each with a human message and a hint for what to do."""

from __future__ import annotations

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26


class HermesStateError(Exception):
    """Base class: an expected failure with a message and a hint the CLI prints."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        return self.message


class InvalidProfileNameError(HermesStateError, ValueError):
    """A profile name that does not match the allowed shape or is reserved."""

    hint = "See the existing profiles with: hermes profile list"


class ProfileNotFoundError(HermesStateError):
    """A named profile whose directory does not exist."""


class ProfileExistsError(HermesStateError):
    """A profile that cannot be created because it already exists."""


class StoreNotFoundError(HermesStateError):
    """No store file exists yet at the path (read-only opens never create one)."""

    hint = "Nothing has been recorded in this profile yet."


class StoreCorruptError(HermesStateError):
    """The store file is damaged or is not an SQLite database."""

    hint = "Salvage what can be read into a new file with: hermes sessions recover --to NEW.db"


class StoreReadOnlyError(HermesStateError):
    """A write was attempted through a read-only handle."""

    hint = "Open the store without read_only=True to write."


class SchemaTooNewError(HermesStateError):
    """The store was written by a newer version of this software."""

    hint = "Upgrade hermes; the store can still be browsed read-only."


class UnknownSchemaError(SchemaTooNewError):
    """The store carries a schema version no Hermes Agent release this code knows writes."""

    hint = "Browse it read-only (list, search, show, export); upgrade hermes to write to it."


class NotAHermesStoreError(StoreCorruptError):
    """An SQLite file without a Hermes session schema (another application's database)."""

    hint = "Check the path: this is not a Hermes state.db. Nothing was written to it."


class StoreNeedsMigrationError(HermesStateError):
    """The command needs a schema or layout the store does not have yet."""

    hint = "Upgrade the store first with: hermes db migrate"


class StoreLockedError(HermesStateError):
    """Another process held the write lock for longer than this write's patience."""

    hint = "Another process holds the store; see who with: hermes db lockowners"
    cause = "locked"
    failure_reason = "session_persistence_failed:locked"


class SessionNotFoundError(HermesStateError, LookupError):
    """No session matches the given id, prefix or title."""

    hint = "List sessions with: hermes sessions list"


class AmbiguousSessionIdError(HermesStateError, LookupError):
    """A session id prefix that matches more than one session."""

    hint = "Type more characters of the id."


class TitleInUseError(HermesStateError, ValueError):
    """A title that another session already holds."""

    hint = "Titles are unique; pick another or rename the other session first."

    def __init__(self, title: str, holder: str) -> None:
        super().__init__(f"Title '{title}' is already in use by session {holder}")
        self.title = title
        self.holder = holder


class InvalidTitleError(HermesStateError, ValueError):
    """A title that is too long or otherwise unusable."""

    hint = "Titles are at most 100 characters."


class SortUnavailableError(HermesStateError, ValueError):
    """A search asked for relevance order where its matches have none (substring or scan)."""

    hint = "Use --sort newest or --sort oldest (the default order falls back to newest by itself)."


class LedgerBusyError(HermesStateError):
    """A session still has open runtime-ledger work and cannot be deleted."""

    hint = "Wait for the gateway to finish (or resolve the unknown inputs) and retry."

    def __init__(self, message: str, open_rows: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.open_rows = open_rows or []


class StoreBusyError(HermesStateError):
    """A structural rewrite refused because another process holds the store open."""

    hint = "Stop the other process (see: hermes db lockowners) or pass --force."


def is_lock_error(exc: BaseException) -> bool:
    """Tell whether an sqlite3 error means the store is locked (BUSY/LOCKED), by result code."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)
    import sqlite3  # lazily: home.py imports this module on the CLI's start-up path

    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_corruption_error(exc: BaseException) -> bool:
    """Tell whether an sqlite3 error means the file is damaged or not a database."""
    import sqlite3

    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def translate_sqlite_error(
    exc: BaseException, path: object = "the store"
) -> HermesStateError | None:
    """Return the typed error for a damaged or locked store's sqlite3 error, else None."""
    if is_corruption_error(exc):
        return StoreCorruptError(f"{path} is damaged: {exc}")
    if is_lock_error(exc):
        return StoreLockedError(f"{path} is locked by another process: {exc}")
    return None
