"""The journal mode a store gets (SPEC §19.5): the store's own, and for a new store a safe one.

An existing store keeps its mode: switching it is a change of the file that belongs to the agent,
and a live switch under other connections can lose their uncommitted work. A new store gets WAL
only where that is safe — the linked SQLite has the WAL-reset fix (3.51.3 and later, or the
backports 3.50.7+ and 3.44.6+; other versions can corrupt a WAL database when writers and
checkpoints race, https://sqlite.org/wal.html#walresetbug) and the directory is not on a
filesystem without working shared memory (virtiofs/9p bind mounts) — else DELETE, the rule the
agent itself follows. The user's Hermes config (``database.journal_mode: wal|delete`` in
``config.yaml`` of the Hermes home) decides when it is set.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("hermes_state")

CROSS_VM_FILESYSTEMS = frozenset(
    {"virtiofs", "fuse.virtiofs", "9p", "9p2000", "9p2000.l", "9p2000.u"}
)
_warned: set[str] = set()


def wal_reset_vulnerable(version: tuple[int, ...] | None = None) -> bool:
    """Tell whether the linked SQLite carries the WAL-reset bug (3.7.0 to 3.51.2 unpatched)."""
    v = tuple(version or sqlite3.sqlite_version_info)[:3]
    if v < (3, 7, 0):
        return False  # no WAL at all
    if v >= (3, 51, 3):
        return False
    backported = (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0)
    return not backported


def _mount_fstype(directory: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """Return the filesystem type of the mount holding directory (Linux), or None."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    target = str(directory.resolve())
    best, best_type = "", None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        if (target == mount_point or target.startswith(mount_point.rstrip("/") + "/")) and len(
            mount_point
        ) > len(best):
            best, best_type = mount_point, right.split()[0]
    return best_type


def wal_unsupported_filesystem(directory: Path) -> bool:
    """Tell whether directory is on a filesystem where WAL's shared memory is unsafe."""
    return _mount_fstype(directory) in CROSS_VM_FILESYSTEMS


_JOURNAL_RE = re.compile(r"^\s+journal_mode\s*:\s*['\"]?([A-Za-z]+)['\"]?\s*(#.*)?$")


def configured_mode(home: Path) -> str | None:
    """Return ``database.journal_mode`` from the Hermes config (``wal``/``delete``), if set.

    Reads the two-level YAML mapping by hand (the store needs no YAML parser for one key); an
    unreadable file or any other value counts as not set.
    """
    try:
        text = (home / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    in_database = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            in_database = line.split("#", 1)[0].strip() == "database:"
            continue
        if in_database:
            match = _JOURNAL_RE.match(line)
            if match:
                mode = match.group(1).lower()
                return mode if mode in ("wal", "delete") else None
    return None


@dataclass(frozen=True)
class Choice:
    """The journal mode chosen for a new store, and why."""

    mode: str  # "wal" or "delete"
    reason: str


def choose_for_new_store(path: Path) -> Choice:
    """Pick the journal mode of a store about to be created at path."""
    configured = configured_mode(path.parent)
    if configured == "delete":
        return Choice("delete", "database.journal_mode is set to delete in config.yaml")
    if configured == "wal":
        if wal_reset_vulnerable():
            _warn_once(
                f"{path}: database.journal_mode=wal is configured, but SQLite "
                f"{sqlite3.sqlite_version} has the WAL-reset corruption bug "
                "(https://sqlite.org/wal.html#walresetbug); using WAL as configured"
            )
        return Choice("wal", "database.journal_mode is set to wal in config.yaml")
    if wal_reset_vulnerable():
        return Choice(
            "delete",
            f"SQLite {sqlite3.sqlite_version} has the WAL-reset bug (fixed in 3.51.3, "
            "3.50.7, 3.44.6)",
        )
    if wal_unsupported_filesystem(path.parent):
        return Choice("delete", "the store's filesystem has no safe shared memory (virtiofs/9p)")
    return Choice("wal", f"SQLite {sqlite3.sqlite_version} has the WAL-reset fix")


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def apply_to_new_store(conn: sqlite3.Connection, path: Path) -> str:
    """Set the chosen mode on a just-created, empty store; return the mode it has."""
    choice = choose_for_new_store(path)
    got = conn.execute(f"PRAGMA journal_mode={choice.mode.upper()}").fetchone()[0].lower()
    if got != choice.mode:
        log.warning("%s: journal mode %s is not available here (got %s)", path, choice.mode, got)
    return str(got)


def current_mode(conn: sqlite3.Connection) -> str:
    """Return the store's journal mode as SQLite reports it (never changes it)."""
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes a checkpointed WAL is truncated back to (the agent's)
# Errors with which a filesystem refuses WAL outright (NFS/SMB: SQLITE_PROTOCOL; some FUSE mounts:
# "not authorized"); any other error setting WAL is not proof WAL cannot work and is raised.
WAL_INCOMPATIBLE_MARKERS = ("locking protocol", "not authorized")


def apply_wal_with_fallback(conn: sqlite3.Connection, db_label: str = "state.db") -> str:
    """Set up a connection's journal mode as the agent's store library does; return the mode.

    The store's own mode is kept: a WAL store stays WAL (its mode is never set again), and so
    does any other store that has pages. A new, empty file gets the mode this package chooses
    (:func:`choose_for_new_store`), with DELETE instead where the filesystem refuses WAL. When
    the probe itself fails (another opener holds a lock) nothing is changed and ``"wal"`` is
    returned, as the agent does: a switch made blind could take a live WAL store out of WAL.
    """
    try:
        current = current_mode(conn)
    except sqlite3.OperationalError as exc:
        log.debug("%s: journal mode unreadable (%s); leaving it as it is", db_label, exc)
        return "wal"
    path = None if current == "wal" else _new_store_file(conn)
    if path is None:
        _apply_companions(conn, current)
        return current
    choice = choose_for_new_store(path)
    if choice.mode == "wal":
        got = _enable_wal(conn, db_label)
    elif current == choice.mode:
        got = current
    else:
        got = _set_mode_no_wait(conn, choice.mode, current)
    _apply_companions(conn, got)
    return got


def _new_store_file(conn: sqlite3.Connection) -> Path | None:
    """Return the file of the connection's main database if it is still empty (None: it has
    pages, whose mode is the store's own, or it is in memory or temporary)."""
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) > 0:
        return None
    for row in conn.execute("PRAGMA database_list").fetchall():
        if row[1] == "main":
            return Path(row[2]) if row[2] else None
    return None


def _enable_wal(conn: sqlite3.Connection, db_label: str) -> str:
    """Switch a non-WAL store to WAL; fall back to DELETE where the filesystem refuses WAL."""
    try:
        # The pragma returns the mode it left: some network filesystems refuse without raising.
        got = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    except sqlite3.OperationalError as exc:
        if not any(marker in str(exc).lower() for marker in WAL_INCOMPATIBLE_MARKERS):
            raise
        try:
            on_disk: str | None = current_mode(conn)
        except sqlite3.OperationalError:
            on_disk = None
        if on_disk in ("wal", None):
            raise  # another process made it WAL meanwhile, or it cannot be read: never leave WAL
        _warn_once(
            f"{db_label}: WAL journal_mode unsupported on this filesystem ({exc}) — falling "
            "back to journal_mode=DELETE (slower, but works on NFS/SMB/FUSE; see "
            "https://www.sqlite.org/wal.html). This warning fires once per process."
        )
        return _set_mode_no_wait(conn, "delete", str(on_disk))
    if got != "wal":
        _warn_once(f"{db_label}: the filesystem refused WAL without an error; journal mode {got}")
    return got


def _set_mode_no_wait(conn: sqlite3.Connection, mode: str, before: str) -> str:
    """Set a rollback-journal mode without waiting for other openers; return the mode in effect.

    Leaving WAL needs the store to itself. With no busy wait, a store another process made WAL
    since the probe refuses at once and is left as it is, instead of being switched between
    that process's transactions.
    """
    previous = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute("PRAGMA busy_timeout=0")
    try:
        return str(conn.execute(f"PRAGMA journal_mode={mode.upper()}").fetchone()[0]).lower()
    except sqlite3.OperationalError as exc:
        if not _is_busy(exc):
            raise
        log.debug("journal mode left as it is: another process has the store open (%s)", exc)
        try:
            return current_mode(conn)
        except sqlite3.OperationalError:
            return before
    finally:
        conn.execute(f"PRAGMA busy_timeout={previous}")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Tell whether the error is SQLITE_BUSY/SQLITE_LOCKED (errors.py sits in this same layer)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (code & 0xFF) in (5, 6) if code is not None else "locked" in str(exc).lower()


def _apply_companions(conn: sqlite3.Connection, mode: str) -> None:
    """Apply the settings the agent pairs with its journal mode: the WAL size bound, and on
    macOS the full-fsync barriers (its fsync does not order writes to the platter)."""
    if mode == "wal":
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    if sys.platform == "darwin":  # read per call: tests stand in another platform
        # Best effort, as the agent's: a durability preference is no reason to fail an open.
        with contextlib.suppress(sqlite3.OperationalError):
            conn.execute("PRAGMA checkpoint_fullfsync=1")
            conn.execute("PRAGMA synchronous=FULL")


@dataclass(frozen=True)
class Report:
    """The store's journal mode, the SQLite behind it and the risk that combination carries."""

    mode: str
    sqlite_version: str
    wal_reset_vulnerable: bool

    @property
    def at_risk(self) -> bool:
        """Tell whether this store runs WAL on a SQLite with the WAL-reset bug."""
        return self.mode == "wal" and self.wal_reset_vulnerable

    def describe(self) -> str:
        """Say it in one line."""
        fix = "without" if self.wal_reset_vulnerable else "with"
        line = f"journal mode {self.mode}; SQLite {self.sqlite_version} ({fix} the WAL-reset fix)"
        if self.at_risk:
            line += (
                "; risk: WAL on this SQLite can corrupt the store when writers and checkpoints "
                "race (https://sqlite.org/wal.html#walresetbug)"
            )
        return line

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready view."""
        return {
            "mode": self.mode,
            "sqlite_version": self.sqlite_version,
            "wal_reset_vulnerable": self.wal_reset_vulnerable,
            "at_risk": self.at_risk,
        }


def report(conn: sqlite3.Connection) -> Report:
    """Report the store's journal mode and its risk (read-only)."""
    return Report(
        mode=current_mode(conn),
        sqlite_version=sqlite3.sqlite_version,
        wal_reset_vulnerable=wal_reset_vulnerable(),
    )
