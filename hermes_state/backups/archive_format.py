"""What a backup archive is: its names, limits and manifest's shape, shared by every use of one.

The constants, errors and member-name rules that backup (create), archive listing and rotation,
verify and restore all read an archive by.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state.store.connection import (
    read_only_uri,
)
from hermes_state.store.errors import HermesStateError
from hermes_state.store.home import STORE_FILE
from hermes_state.store.sql import SIDECAR_SUFFIXES

MANIFEST = "manifest.json"
# Archives this tool names: hermes-backup-[<profile>-]<YYYYmmdd-HHMMSS>[-N].zip (older releases
# wrote no profile). Rotation trusts the manifest, not the name: see _same_home.
ARCHIVE_RE = re.compile(r"^hermes-backup-(?:[a-z0-9][a-z0-9_-]*-)?\d{8}-\d{6}(?:-\d+)?\.zip$")
ALL_PROFILES_LABEL = "all-profiles"
BACKUP_WORK_PREFIX = ".hermes-backup-"
RESTORE_WORK_PREFIX = ".hermes-restore-"
VERIFY_WORK_PREFIX = ".hermes-verify-"
WORK_DIR_PREFIXES = (BACKUP_WORK_PREFIX, RESTORE_WORK_PREFIX, VERIFY_WORK_PREFIX)
PRE_RESTORE_MARK = ".pre-restore-"  # state.db.pre-restore-<stamp>: what a restore replaced
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
REPLICATION_DIR_RE = re.compile(r"\..+-litestream\Z|\.hermes-replica-")
SKIP_DIRS = frozenset({"__pycache__", ".cache", "backups"})
SKIP_SUFFIXES = (".lock", ".pyc", ".pyo", ".partial")
# Runtime files of a running gateway: never archived, never overwritten by a restore.
RUNTIME_FILES = frozenset({"gateway.pid", "cron.pid", "gateway_state.json", "processes.json"})
PRIVATE_FILES = frozenset({".env", "auth.json", "vault.key", "vault.json.enc"})
MAX_MEMBER_BYTES = 64 * 2**30
MAX_MANIFEST_BYTES = 16 * 2**20
# Deflate reaches ~1000:1 on zeros; real files (SQLite pages, text) stay far below this.
MAX_RATIO = 200
COMPRESS_LEVEL = 1  # --compress: zlib's fastest level (most of deflate's gain on SQLite pages)
RATIO_FLOOR_BYTES = 1 << 20  # smaller members are not worth a ratio check
COPY_CHUNK = 256 << 10
MANIFEST_FORMAT = 2
# The vault (hermes_state.vault.vault): <home>/vault/<YYYY>.db per profile, and the half-made store
# a
# killed move leaves (.<YYYY>.db.new-<pid>, never a store anyone reads, never archived).
VAULT_DIR = "vault"
VAULT_MEMBER_RE = re.compile(r"^(?:profiles/[^/]+/)?vault/\d{4}\.db$")
VAULT_TEMP_RE = re.compile(r"^\.\d{4}\.db\.new-\d+$")
# How long a backup waits, without --wait, for another process's lock on a store and for a
# running `hermes vault move` or `return` (as long as an edit waits for the store).
PATIENCE_S = 20.0
NOT_WRITTEN = "; no archive was written"
LOCKED_HINT = (
    "Another process holds it (see who with: hermes db lockowners). Retry when it is done, or "
    "wait longer with --wait SECONDS; nothing was written and no older archive was removed."
)
LOST_SESSIONS_HINT = (
    "The archive does not hold every session its manifest lists (made while sessions moved "
    "between the store and the vault, or changed since): restore another archive (see "
    "`hermes backup list`). Nothing was changed."
)


class BackupError(HermesStateError):
    """A backup, verify or restore that was refused or failed."""

    hint = "Nothing was changed."


class UnsafeArchiveError(BackupError):
    """An archive with a member that could write outside the home (refused whole)."""

    hint = "The archive was refused before anything was written; do not trust its origin."


@dataclass(frozen=True)
class Member:
    """One file in an archive."""

    name: str
    size: int
    sha256: str
    kind: str  # "sqlite" or "file"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


# --- helpers -------------------------------------------------------------------------------


def hermes_version() -> str:
    """Return this package's version."""
    try:
        from importlib.metadata import version

        return version("hermes-state")
    except Exception:  # not installed (running from a source tree)
        import hermes_state

        return str(getattr(hermes_state, "__version__", "unknown"))


def is_sqlite_name(name: str) -> bool:
    """Tell whether a file name is one of an SQLite database."""
    return name.endswith(SQLITE_SUFFIXES)


def is_store_name(name: str) -> bool:
    """Tell whether an archive member or relative path is a Hermes store (a state.db)."""
    return PurePosixPath(name).name == STORE_FILE


def is_vault_name(name: str) -> bool:
    """Tell whether an archive member or relative path is a vault store (vault/<YYYY>.db)."""
    return VAULT_MEMBER_RE.match(name) is not None


def is_sidecar_name(name: str) -> bool:
    """Tell whether a name is an SQLite journal, WAL or shared-memory file."""
    return name.endswith(SIDECAR_SUFFIXES)


def is_pre_restore_copy(name: str) -> bool:
    """Tell whether a file is a copy of a store kept by a restore (state.db.pre-restore-…)."""
    return PRE_RESTORE_MARK in name


def profile_store_of(name: str) -> str:
    """Return the archive name of the live store whose profile a store member belongs to
    (vault/2025.db -> state.db, profiles/x/vault/2025.db -> profiles/x/state.db)."""
    if is_vault_name(name):
        return name[: name.rindex(VAULT_DIR + "/")] + STORE_FILE
    return name


def session_ids_in(path: Path) -> set[str]:
    """Return the session ids of a snapshot or staged store (not a live file: read immutable)."""
    conn = sqlite3.connect(read_only_uri(path) + "&immutable=1", uri=True)
    try:
        return {str(r[0]) for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def session_set_entry(ids: set[str]) -> dict[str, Any]:
    """Return the manifest's record of a profile's sessions: how many, and a digest of the ids."""
    digest = hashlib.sha256(json.dumps(sorted(ids), ensure_ascii=False).encode()).hexdigest()
    return {"count": len(ids), "sha256": digest}
