"""Opening the current profile's store for a command: read-only for browsing, writable for edits."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

T = TypeVar("T")


def db_path() -> Path:
    """Return the current profile's store path."""
    from hermes_state.store.home import default_db_path

    return default_db_path()


def profile_name() -> str:
    """Return the name of the profile this command runs in."""
    from hermes_state.store.home import current_profile_name

    return current_profile_name()


@contextlib.contextmanager
def read_store(path: Path | None = None) -> Iterator[Store]:
    """Open the store read-only (never created or migrated); raises StoreNotFoundError if absent."""
    from hermes_cli.rendering import render
    from hermes_cli.shared import waiting
    from hermes_state.store.connection import open_store

    target = path or db_path()
    if path is None:
        require_home(target.parent)
    store = open_store(target, read_only=True, waiting=waiting.current())
    try:
        if store.layout is not None and (store.too_new or store.layout.kind == "old"):
            # A schema number no known release writes: read, with a note naming the nearest.
            render.warn(
                f"{store.path}: {store.layout.describe()}; showing what this hermes can read."
            )
        yield store
    except sqlite3.DatabaseError as exc:
        raise _typed(store, exc) from exc
    finally:
        store.close()


def require_home(home: Path) -> None:
    """Refuse a Hermes home that does not exist: an empty answer there would be a false one."""
    import os

    from hermes_state.store.errors import HomeNotFoundError
    from hermes_state.store.home import display_hermes_home

    if home.is_dir():
        return
    shown = display_hermes_home(home)
    if os.environ.get("HERMES_HOME", "").strip():
        hint = "HERMES_HOME names it: check its spelling, or unset it for the default home."
    else:
        hint = "Hermes Agent creates it on its first run; nothing has been recorded here yet."
    raise HomeNotFoundError(f"the Hermes home {shown} does not exist", hint=hint)


def _typed(store: Store, exc: sqlite3.DatabaseError) -> BaseException:
    """Turn a damaged/locked store's sqlite3 error into its typed error (others unchanged).

    A write refused by the file system is named as a write names it: a read-only file system,
    a directory where SQLite cannot create the file this store's journal mode needs, or a file
    this user may not write (VACUUM and the index merge run outside Store.write).
    """
    from hermes_state.store.errors import StoreCorruptError
    from hermes_state.store.store_file import write_error

    typed = write_error(store, exc)
    if typed is None:
        return exc
    if isinstance(typed, StoreCorruptError):
        store.mark_damaged()
    return typed


@contextlib.contextmanager
def write_store(
    path: Path | None = None, *, create: bool = False, check: str = "file"
) -> Iterator[Store]:
    """Open the store for an edit, within the schema it has (never migrated, never moved aside),
    after checking that it is not damaged (nothing is written to a damaged store).

    ``create`` lets a command that brings data (import) start a new store where none exists.
    ``check`` is "file" (PRAGMA quick_check of the whole file: for commands that delete or
    rewrite many pages) or "sessions" (the sessions table and its indexes only: for edits of one
    session row, which read and write nothing else).
    """
    from hermes_cli.shared import waiting
    from hermes_state.store.connection import open_store
    from hermes_state.upkeep.store_check import require_intact

    store = open_store(path or db_path(), role="edit", create=create, waiting=waiting.current())
    try:
        require_intact(store, None if check == "file" else check)
        yield store
    except sqlite3.DatabaseError as exc:
        raise _typed(store, exc) from exc
    finally:
        store.close()


def problem_kind(exc: BaseException) -> str:
    """Classify why a profile's store could not be read: missing, too_new, busy, corrupt, error."""
    from hermes_state.store.errors import (
        SchemaTooNewError,
        StoreBusyError,
        StoreCorruptError,
        StoreLockedError,
        StoreNotFoundError,
        is_corruption_error,
        is_lock_error,
    )

    if isinstance(exc, StoreNotFoundError):
        return "missing"
    if isinstance(exc, SchemaTooNewError):
        return "too_new"
    if isinstance(exc, StoreLockedError | StoreBusyError) or is_lock_error(exc):
        return "busy"
    if isinstance(exc, StoreCorruptError) or is_corruption_error(exc):
        return "corrupt"
    return "error"


def across_profiles(fn: Callable[[str, Store], T]) -> tuple[list[T], list[dict[str, Any]]]:
    """Run fn(profile name, read-only store) for the root and every named profile.

    A profile whose store is missing, newer than this code, busy or corrupt is reported in the
    returned errors as {profile, error, message} and skipped, so the others are still shown.
    """
    from hermes_cli.shared import waiting
    from hermes_state.store.connection import open_store
    from hermes_state.store.errors import HermesStateError
    from hermes_state.store.home import STORE_FILE, list_profiles

    results: list[T] = []
    errors: list[dict[str, Any]] = []
    for info in list_profiles():
        path = info.path / STORE_FILE
        try:
            store = open_store(path, read_only=True, waiting=waiting.current())
        except (HermesStateError, sqlite3.Error) as exc:
            errors.append({"profile": info.name, "error": problem_kind(exc), "message": str(exc)})
            continue
        try:
            if store.too_new:
                errors.append(
                    {
                        "profile": info.name,
                        "error": "too_new",
                        "message": f"{path} was written by a newer version of hermes",
                    }
                )
                continue
            results.append(fn(info.name, store))
        except (HermesStateError, sqlite3.Error) as exc:
            errors.append({"profile": info.name, "error": problem_kind(exc), "message": str(exc)})
        finally:
            store.close()
    return results, errors


def report_profile_errors(errors: list[dict[str, Any]]) -> None:
    """Print one warning line on stderr per profile that could not be read."""
    from hermes_cli.rendering import render

    for err in errors:
        render.warn(f"profile {err['profile']}: {err['error']}: {err['message']}")


def reclaim_after_delete(store: Store, bar: Any, result: Any, *, compact: bool, force: bool) -> Any:
    """Give back the space a prune or a vault move freed (a phase of bar); None if it freed none."""
    from hermes_state.upkeep import reclaim

    if not result.sessions:
        return None
    # optimize() reports no progress of its own: a phase with elapsed time.
    bar.phase("Reclaiming space")
    return reclaim.reclaim_after_delete(store, result.messages, compact=compact, force=force)
