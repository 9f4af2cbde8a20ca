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

import logging
import re
import sqlite3
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
