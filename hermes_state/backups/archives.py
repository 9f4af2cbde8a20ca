"""Archives in a folder: where a new one goes, which ones a home made, listing and rotation.

Rotation trusts the manifest, not the name: only archives this tool made of the same home are
ever removed (see _same_home).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import zipfile
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes_state.backups.archive_format import (
    ALL_PROFILES_LABEL,
    ARCHIVE_RE,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    BackupError,
    is_pre_restore_copy,
    is_sidecar_name,
    is_store_name,
    is_vault_name,
)
from hermes_state.store.errors import OutputDirectoryError
from hermes_state.store.home import profile_name_of


def archive_label(home: Path, all_profiles: bool) -> str:
    """Return the name part that says whose archive it is: the profile, or all-profiles."""
    return ALL_PROFILES_LABEL if all_profiles else profile_name_of(home)


def backup_destination(
    home: Path, output: str | os.PathLike[str] | None, *, all_profiles: bool = False
) -> Path:
    """Return where a new archive goes (nothing is created).

    No output: a new name in <home>/backups. An existing directory, or a path written with a
    trailing '/': a new name in it. Anything else is the archive's own file name ('.zip' is
    added when it has no such suffix); an existing file is never replaced. Of a directory, only
    the last component may be missing (``make_output_dir`` creates it); an archive's own name
    needs its directory to exist. Anything more missing is a wrong path or a drive that is not
    mounted, refused here.
    """
    label = archive_label(home, all_profiles)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    if output is None:
        folder = home / "backups"
    else:
        text = os.fspath(output)
        if not text:
            raise BackupError("The output path is empty", hint="Give a directory or a .zip name.")
        target = Path(os.path.abspath(os.path.expanduser(text)))
        if text.endswith(("/", os.sep)) or target.is_dir():
            if target.exists() and not target.is_dir():
                raise BackupError(
                    f"{target} is a file, not a directory",
                    hint="Remove the trailing '/' to write the archive under that name, or "
                    "pick another directory.",
                )
            folder = target
        else:
            if target.suffix.lower() != ".zip":
                target = target.with_name(target.name + ".zip")
            if target.exists() or target.is_symlink():
                raise BackupError(
                    f"Refusing to overwrite existing file {target}",
                    hint="Remove it, pick another name, or give a directory.",
                )
            check_parent(target.parent, may_create=False)
            return target
    check_parent(folder)
    candidate = folder / f"hermes-backup-{label}-{stamp}.zip"
    n = 1
    while candidate.exists():
        candidate = folder / f"hermes-backup-{label}-{stamp}-{n}.zip"
        n += 1
    return candidate


# What releases before the locked scratch directories left when killed: the archive being
# written, named after it and the writer's pid.
_OLD_PARTIAL_RE = re.compile(r"^\.hermes-backup-[^/]*\.zip\.(\d+)\.partial$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_old_partials(folder: Path) -> list[Path]:
    """Delete half-written archives older releases' killed backups left in folder."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            match = _OLD_PARTIAL_RE.match(entry.name)
            if match and entry.is_file() and not _pid_alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def check_parent(folder: Path, *, may_create: bool = True) -> None:
    """Refuse an output folder under a file, or missing beyond its last component."""
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            raise BackupError(f"{probe} is a symbolic link to nothing", hint="Pick another path.")
        probe = probe.parent
    if not probe.is_dir():
        raise BackupError(
            f"Cannot write under {folder}: {probe} is a file, not a directory",
            hint="Pick a path whose parents are directories.",
        )
    if probe != folder and (probe != folder.parent or not may_create):
        # Only the last directory is made: the rest missing means a drive not mounted, or a typo.
        missing = folder.parent if may_create else folder
        raise OutputDirectoryError(
            f"{missing} does not exist; no archive was written and nothing was created"
        )


def _read_manifest_of(path: Path) -> dict[str, Any] | None:
    """Return an archive's manifest, or None when it is not a readable hermes archive."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(MANIFEST)
            if info.file_size > MAX_MANIFEST_BYTES:
                return None
            data = json.loads(zf.read(info))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _same_home(manifest: dict[str, Any] | None, base: Path, all_profiles: bool) -> bool:
    """Tell whether an archive's manifest says it was made of this home, the same way."""
    if manifest is None or not isinstance(manifest.get("base"), str):
        return False
    if bool(manifest.get("all_profiles")) != all_profiles:
        return False
    return bool(os.path.realpath(manifest["base"]) == os.path.realpath(base))


def archives_of(folder: Path, base: Path, *, all_profiles: bool = False) -> list[Path]:
    """Return this tool's archives of the home base in folder, newest first (by mtime)."""
    found = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for path in entries:
        if not ARCHIVE_RE.match(path.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and _same_home(_read_manifest_of(path), base, all_profiles):
                found.append((st.st_mtime_ns, path.name, path))
    found.sort(reverse=True)
    return [path for _mtime, _name, path in found]


def rotate(current: Path, keep: int, base: Path, all_profiles: bool) -> list[Path]:
    """Remove archives of the same home beyond the newest keep (never current); return them."""
    others = [p for p in archives_of(current.parent, base, all_profiles=all_profiles)]
    others = [p for p in others if p != current]
    removed = others[max(0, keep - 1) :]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return removed


@dataclass(frozen=True)
class ArchiveInfo:
    """One archive in a backup folder, as its manifest describes it (None where it cannot)."""

    path: Path
    bytes: int
    modified: float  # the file's mtime (epoch seconds)
    created_at: str | None  # the manifest's (ISO 8601, UTC)
    profile: str | None
    all_profiles: bool
    complete: bool | None
    sessions: int | None  # over every store in the archive
    messages: int | None
    hermes_version: str | None
    readable: bool  # a zip with a hermes manifest
    vault_stores: int = 0  # vault stores in the archive, and what they hold
    vault_sessions: int | None = None
    vault_messages: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {**asdict(self), "path": str(self.path)}


def _store_counts(
    manifest: dict[str, Any], *, vault: bool = False
) -> tuple[int | None, int | None]:
    """Sum the sessions and messages the manifest counted in every store (or every vault
    store) of the archive."""
    sessions = messages = None
    databases = manifest.get("databases")
    wanted = is_vault_name if vault else is_store_name
    for name, info in databases.items() if isinstance(databases, dict) else ():
        tables = info.get("tables") if isinstance(info, dict) else None
        if not wanted(name) or not isinstance(tables, dict):
            continue
        s, m = tables.get("sessions"), tables.get("messages")
        if isinstance(s, int) and isinstance(m, int):
            sessions, messages = (sessions or 0) + s, (messages or 0) + m
    return sessions, messages


def _created(manifest: dict[str, Any]) -> tuple[str | None, float | None]:
    """Return the manifest's creation time as written and as epoch seconds (None: unusable)."""
    text = manifest.get("created_at")
    if not isinstance(text, str):
        return None, None
    try:
        return text, datetime.fromisoformat(text).timestamp()
    except ValueError:
        return text, None


def list_archives(folder: Path) -> list[ArchiveInfo]:
    """Describe the archives in a backup folder, newest first (only their manifests are read)."""
    # This tool's archives by name, and any other zip that carries a hermes manifest.
    found: list[tuple[float, float, str, ArchiveInfo]] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for path in entries:
        if not path.name.endswith(".zip"):
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        manifest = _read_manifest_of(path)
        if manifest is None and not ARCHIVE_RE.match(path.name):
            continue  # some other zip
        data = manifest or {}
        text, when = _created(data)
        sessions, messages = _store_counts(data)
        vault_sessions, vault_messages = _store_counts(data, vault=True)
        members = data.get("members")
        complete = data.get("complete")
        info = ArchiveInfo(
            path=path,
            bytes=st.st_size,
            modified=st.st_mtime,
            created_at=text,
            profile=_text_field(data.get("profile")),
            all_profiles=bool(data.get("all_profiles")),
            complete=complete if isinstance(complete, bool) else None,
            sessions=sessions,
            messages=messages,
            hermes_version=_text_field(data.get("hermes_version")),
            readable=manifest is not None and isinstance(members, dict),
            vault_stores=sum(map(is_vault_name, members)) if isinstance(members, dict) else 0,
            vault_sessions=vault_sessions,
            vault_messages=vault_messages,
        )
        found.append((when if when is not None else st.st_mtime, st.st_mtime, path.name, info))
    found.sort(key=lambda item: item[:3], reverse=True)
    return [item[3] for item in found]


def _text_field(value: Any) -> str | None:
    """Return a manifest string as it is, when it is printable text (else None)."""
    return value if isinstance(value, str) and value.isprintable() else None


def backups_in(home: Path) -> list[Path]:
    """Return the backups a profile home holds: archives under backups/ and pre-restore copies."""
    found: list[Path] = []
    folder = home / "backups"
    if folder.is_dir() and not folder.is_symlink():
        found += sorted(p for p in folder.iterdir() if p.name.endswith(".zip") and p.is_file())
    if home.is_dir():
        found += sorted(
            p for p in home.iterdir() if is_pre_restore_copy(p.name) and not is_sidecar_name(p.name)
        )
    return found
