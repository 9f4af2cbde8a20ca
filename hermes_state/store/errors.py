"""Typed errors of the session store, each with a human message and a hint for what to do."""

from __future__ import annotations

import errno

SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26
SQLITE_READONLY_ROLLBACK = SQLITE_READONLY | (3 << 8)
SQLITE_READONLY_DIRECTORY = SQLITE_READONLY | (6 << 8)


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


class HomeNotFoundError(HermesStateError):
    """The Hermes home directory itself does not exist (a mistyped HERMES_HOME, say)."""


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


def missing_column(
    path: object, column: str, version: int | None = None
) -> StoreNeedsMigrationError:
    """Return the refusal of a write whose column (``table.column``) the store's layout lacks,
    naming the first release family that has it."""
    from hermes_state.store import releases

    first = releases.first_with(column)
    at = f" (schema {version})" if version is not None else ""
    since = (
        f"; releases have it from {first.first_release} (schema {first.schema})" if first else ""
    )
    return StoreNeedsMigrationError(
        f"{path}{at} has no {column} column{since}; nothing was changed",
        hint="Upgrade the store with `hermes db migrate` (the agent release that wrote it "
        "keeps working), then retry.",
    )


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


class CompressionError(HermesStateError):
    """A compaction or rotation that cannot be made as asked."""

    hint = "Re-read the session (it may have been rotated or ended meanwhile) and retry."


class SortUnavailableError(HermesStateError, ValueError):
    """A search asked for relevance order where its matches have none (substring or scan)."""

    hint = "Use --sort newest or --sort oldest (the default order falls back to newest by itself)."


class LedgerBusyError(HermesStateError):
    """A session still has open runtime-ledger work and cannot be deleted."""

    hint = "Wait for the gateway to finish (or resolve the unknown inputs) and retry."

    def __init__(self, message: str, open_rows: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.open_rows = open_rows or []


class StoreAccessError(HermesStateError):
    """The store file cannot be opened as asked: permissions, a read-only place, not a file."""

    hint = "Run hermes as the user who owns the store, or check the path."


class StoreWriteProtectedError(StoreAccessError):
    """The store, or a file SQLite keeps beside it, was made read-only (no owner write bit)."""


class HotJournalError(StoreAccessError):
    """A writer stopped mid-transaction; the store must be rolled back before it can be read."""

    hint = (
        "A process stopped in the middle of a write and left state.db-journal behind. The next "
        "writer rolls it back (start Hermes, or run a write command such as `hermes sessions "
        "pin`), then retry. Do not delete the journal: that would leave the store damaged."
    )


def hot_journal_hint(path: object) -> str:
    """Say which journal a killed writer left beside the store at path, and what rolls it back."""
    import os
    import re

    text = os.fspath(path) if isinstance(path, str | os.PathLike) else str(path)
    journal = os.path.basename(text) + "-journal"
    folder = os.path.basename(os.path.dirname(text))
    if folder == "vault" and re.fullmatch(r"\d{4}\.db", os.path.basename(text)):
        # A vault store is ours: any hermes command that opens it rolls the journal back,
        # when it may write in the vault directory.
        return (
            f"A process stopped in the middle of a write and left vault/{journal} behind. "
            "Any hermes command that reads the vault rolls it back (for example `hermes vault "
            "list`) when run as the user who owns the vault directory; this one could not "
            "write there. Do not delete the journal: that would leave the store damaged."
        )
    return (
        f"A process stopped in the middle of a write and left {journal} behind. The next "
        "writer rolls it back (start Hermes, or run a write command such as `hermes sessions "
        "pin`), then retry. Do not delete the journal: that would leave the store damaged."
    )


class OutputDirectoryError(HermesStateError):
    """An output path whose parent directories do not exist (created: the last one at most)."""

    hint = "Create the directory first, or check that the drive it is on is mounted."


class DiskFullError(HermesStateError):
    """The file system ran out of space (or quota) during a write."""

    hint = "Free some space (or write somewhere else) and retry."


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
    """Return the typed error for a damaged, locked, full or unreadable store's sqlite3 error,
    else None."""
    if is_corruption_error(exc):
        return StoreCorruptError(f"{path} is damaged: {exc}")
    if is_lock_error(exc):
        return StoreLockedError(f"{path} is locked by another process: {exc}")
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None
    if code == SQLITE_READONLY_ROLLBACK:
        return HotJournalError(
            f"{path} has an unfinished transaction (a hot rollback journal) that a read-only "
            "open cannot roll back",
            hint=hot_journal_hint(path),
        )
    if code == SQLITE_READONLY_DIRECTORY:
        return StoreAccessError(
            f"{path} is in a directory this user cannot write: SQLite must create a file "
            "beside it there (the -journal of a write, or a WAL store's -wal/-shm, needed "
            "even to read it)",
            hint="Run hermes as the directory's owner, or make the directory writable.",
        )
    if (code & 0xFF) == SQLITE_FULL:
        return DiskFullError(f"No space left for {path} ({exc}); the write was rolled back")
    if (code & 0xFF) in (SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_READONLY):
        return StoreAccessError(f"Cannot open {path} for this operation: {exc}")
    if (code & 0xFF) == SQLITE_IOERR:
        return StoreAccessError(
            f"{path}: {exc}",
            hint="The disk may be full or failing: check its free space and the system log, "
            "then retry.",
        )
    return None


# errno values that describe the environment (space, permissions, paths), not a bug.
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_ACCESS_ERRNOS = frozenset(
    {
        errno.EPERM,
        errno.ENOENT,
        errno.EACCES,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EROFS,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)


def translate_os_error(exc: BaseException) -> HermesStateError | None:
    """Return a typed error for an OSError about space, permissions or paths, else None."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in _DISK_FULL_ERRNOS:
        return DiskFullError(f"{exc.strerror}{where}")
    if exc.errno in _ACCESS_ERRNOS:
        return StoreAccessError(
            f"{exc.strerror}{where}", hint="Check the path and its permissions, then retry."
        )
    return None
