"""The vault: old sessions moved out of the live store into per-year stores of the same layout.

``<home>/vault/<YYYY>.db`` holds the session groups whose last activity fell in that UTC year.
A group is a connected component of parent links (a compression chain, its delegated runs and
branch children); it moves whole, and only when every member is ended, unpinned, idle since
before the cutoff and free of open ledger work (prune's rules). The crash rule: a session id
present in the live store is invisible in the vault, so a move copies, verifies, and only then
deletes from live; a return copies into live, then deletes from the vault. Re-running either
completes one a SIGKILL interrupted.

This module holds what every vault operation shares: its errors, the test hooks and the vault
lock. :mod:`vault_plan` chooses, :mod:`vault_move` moves, :mod:`vault_return` brings back,
:mod:`vault_list` and :mod:`vault_check` report, :mod:`vault_export` reads across stores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from hermes_state.store import guard
from hermes_state.store.errors import HermesStateError
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.patience import NO_WAITING, Waiting

# The vault's public names, kept here too (explicit re-exports).
from hermes_state.vault.vault_stores import (
    STORE_NAME as STORE_NAME,
    VAULT_DIR as VAULT_DIR,
    open_vault as open_vault,
    vault_dir as vault_dir,
    vault_paths as vault_paths,
    year_of as year_of,
)

# Session data copied with a group, parents first (foreign keys point from later to earlier).
COPIED_TABLES = ("sessions", "messages", "session_model_usage")
PROMPTS_TABLE = "system_prompts"
# Test hooks (honoured only inside a test process): SIGKILL or pause at a named step.
CRASH_ENV = "HERMES_VAULT_CRASH_AT"
PAUSE_ENV = "HERMES_VAULT_PAUSE_AT"  # "step:PATH": wait (at most 60 s) until PATH exists
STEPS = ("created", "copied", "verified", "deleted", "returned", "unvaulted")


class VaultError(HermesStateError):
    """A vault operation that cannot be done as asked."""

    hint = "`hermes vault check` reports the state of every vault store."


class VaultVerifyError(VaultError):
    """A vault copy that does not match the live rows it was copied from."""

    hint = "Nothing left the live store; run `hermes vault check`, then try again."


def _step(name: str) -> None:
    """Die or pause here when a test asked for it (never outside a test process)."""
    if not guard.in_test_context():
        return
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_ENV, "")
    if pause.startswith(name + ":"):
        release = Path(pause.split(":", 1)[1])
        sys.stderr.write(f"vault: paused at {name}\n")
        sys.stderr.flush()
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


@contextlib.contextmanager
def vault_lock(home: Path) -> Iterator[None]:
    """Hold the profile's vault lock (one move or return at a time); refuse when it is held."""
    import fcntl

    where = ensure_private_dir(vault_dir(home))
    # An ordinary lock file of ours, never a store file: closing it drops only this flock.
    fd = os.open(where / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise VaultError(
                "another `hermes vault move` or `return` (or a `hermes backup` of the vault) "
                "is running on this profile",
                hint="Wait for it to finish, then run this again.",
            ) from exc
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def vault_lock_waiting(
    home: Path, patience: float, waiting: Waiting = NO_WAITING, not_done: str = ""
) -> Iterator[None]:
    """Hold the vault lock of a profile whose vault directory exists, waiting up to patience
    seconds for a running move or return to let go of it (told once through waiting).

    A reader's lock (backup): StoreLockedError when the patience runs out, ``not_done`` ending
    its message. A vault this user cannot write has no lock file to take and no move running.
    """
    import fcntl

    from hermes_state.store.errors import StoreLockedError
    from hermes_state.store.lockowners import write_holders_text
    from hermes_state.store.patience import WAIT_NOTICE_S

    lock = vault_dir(home) / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:  # a read-only vault directory
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)  # flock needs no write
        except OSError:
            yield  # no lock file and none can be made here: no move or return can run
            return
    try:
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= patience:
                    who = write_holders_text(lock)
                    raise StoreLockedError(
                        f"a `hermes vault move` or `return` kept the vault of {home} locked "
                        f"for {waited:.1f}s (patience {patience:g}s)"
                        + (f" (held by {who})" if who else "")
                        + not_done,
                        hint="Let the move or return finish, then retry (--wait SECONDS "
                        "waits longer).",
                    ) from None
                if not told and waited >= WAIT_NOTICE_S:
                    told = True
                    waiting.tell(lock, waited)
                time.sleep(min(0.05, patience - waited))
        yield
    finally:
        os.close(fd)
