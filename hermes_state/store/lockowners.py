"""Who holds or has open a store: byte-range locks from /proc/locks and open descriptors."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("hermes_state.store.lockowners")

PROC = Path("/proc")
WATCHED_SUFFIXES = ("", "-wal", "-shm")
OFD_OWNER = "OFD lock, owner pid not exported by the kernel"
NO_COMMAND = "command line unavailable"
CMDLINE_MAX = 80
NO_WRITE_HOLDER = "no write-class lock held at the deadline (the holder released just before it)"

# SQLite's WAL-index locks are single bytes of the -shm file (os_unix.c, wal.c).
SHM_WRITE, SHM_CHECKPOINT, SHM_RECOVER, SHM_READ0, SHM_DMS = 120, 121, 122, 123, 128
SHM_READ_SLOTS = 5
# Rollback-journal locks live on the "lock-byte page" at 1 GiB of the database file.
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510


@dataclass(frozen=True)
class LockRecord:
    """One granted lock line of /proc/locks."""

    mechanism: str  # POSIX, OFDLCK or FLOCK
    access: str  # READ or WRITE
    pid: int  # -1 for OFD locks
    major: int
    minor: int
    inode: int
    start: int
    end: int | None  # None = to end of file


@dataclass(frozen=True)
class LockHolder:
    """A process holding one SQLite lock on a store file."""

    pid: int | None  # None for OFD locks, whose owner the kernel does not export
    command: str
    file: str
    kind: str  # "WAL write", "WAL read slot 0", "RESERVED", ...
    access: str  # READ or WRITE
    mechanism: str

    def who(self) -> str:
        """Name the holder: 'PID n (command)' or the OFD explanation."""
        if self.pid is None:
            return OFD_OWNER
        return f"PID {self.pid} ({self.command})"

    def describe(self) -> str:
        """Say who holds what, e.g. 'PID 7 (hermes chat) holds WAL write lock on state.db-shm'."""
        return f"{self.who()} holds {self.kind} lock on {self.file}"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class OpenFile:
    """A process that has a store file open without holding any lock on it."""

    pid: int
    command: str
    file: str

    def describe(self) -> str:
        """Say who has which file open."""
        return f"PID {self.pid} ({self.command}) has {self.file} open (no lock)"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass
class LockReport:
    """Everything known about who holds or has open the store at db_path."""

    db_path: Path
    supported: bool
    note: str = ""
    files: list[str] = field(default_factory=list)  # watched files that exist
    holders: list[LockHolder] = field(default_factory=list)
    open_files: list[OpenFile] = field(default_factory=list)
    uninspectable: list[int] = field(default_factory=list)  # pids whose fds could not be read

    def write_holders(self) -> list[LockHolder]:
        """Return the holders of WRITE locks (the ones that can block a writer)."""
        return [h for h in self.holders if h.access == "WRITE"]

    def pids(self, *, exclude_self: bool = True) -> list[int]:
        """Return the pids that hold a lock on or have open a store file."""
        me = os.getpid()
        found = {h.pid for h in self.holders if h.pid is not None}
        found |= {o.pid for o in self.open_files}
        return sorted(p for p in found if not (exclude_self and p == me))

    def describe_other_processes(self) -> str:
        """Name the other processes using the store, for an error message."""
        me = os.getpid()
        parts: dict[int, str] = {}
        for h in self.holders:
            if h.pid is not None and h.pid != me:
                parts.setdefault(h.pid, f"PID {h.pid} ({h.command})")
        for o in self.open_files:
            if o.pid != me:
                parts.setdefault(o.pid, f"PID {o.pid} ({o.command})")
        ofd = any(h.pid is None for h in self.holders)
        names = [parts[p] for p in sorted(parts)]
        if ofd:
            names.append(OFD_OWNER)
        return ", ".join(names)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "db_path": str(self.db_path),
            "supported": self.supported,
            "note": self.note,
            "files": list(self.files),
            "holders": [h.to_dict() for h in self.holders],
            "open_files": [o.to_dict() for o in self.open_files],
            "uninspectable": list(self.uninspectable),
        }


# --- /proc/locks ----------------------------------------------------------------------------


def parse_proc_locks(text: str) -> list[LockRecord]:
    """Parse the text of /proc/locks into granted lock records (waiter '->' lines skipped)."""
    records = []
    for line in text.splitlines():
        fields = line.split()
        # "N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END"; blocked waiters read "N: -> ...".
        if len(fields) < 8 or fields[1] == "->":
            continue
        mechanism, access, pid_text, dev_ino, start_text, end_text = (
            fields[1],
            fields[3],
            fields[4],
            fields[5],
            fields[6],
            fields[7],
        )
        try:
            major_text, minor_text, inode_text = dev_ino.split(":")
            record = LockRecord(
                mechanism=mechanism,
                access=access,
                pid=int(pid_text),
                major=int(major_text, 16),
                minor=int(minor_text, 16),
                inode=int(inode_text),
                start=int(start_text),
                end=None if end_text == "EOF" else int(end_text),
            )
        except ValueError:
            continue  # a line of a format we do not know; never fail the diagnosis over it
        records.append(record)
    return records


def _span(start: int, end: int | None) -> str:
    """Write a byte range as 'a', 'a-b' or 'a-EOF'."""
    return f"{start}-EOF" if end is None else (str(start) if start == end else f"{start}-{end}")


def _shm_byte_name(offset: int) -> str:
    """Name the WAL-index lock at one -shm byte offset (120..128)."""
    if offset == SHM_WRITE:
        return "WAL write"
    if offset == SHM_CHECKPOINT:
        return "WAL checkpoint"
    if offset == SHM_RECOVER:
        return "WAL recover"
    if SHM_READ0 <= offset < SHM_READ0 + SHM_READ_SLOTS:
        return f"WAL read slot {offset - SHM_READ0}"
    return "shm dead-man switch"


def decode_range(suffix: str, start: int, end: int | None) -> list[str]:
    """Name the SQLite locks a byte range covers in a store file ("", "-wal" or "-shm")."""
    last = end if end is not None else sys.maxsize
    if suffix == "-shm":
        # Linux merges adjacent ranges of one owner, so one record may hold several SQLite locks.
        first, stop = max(start, SHM_WRITE), min(last, SHM_DMS)
        names = [_shm_byte_name(b) for b in range(first, stop + 1)]
        if start < SHM_WRITE or last > SHM_DMS:
            names.append(f"shm bytes {_span(start, end)}")
        return names
    if suffix == "":
        names = []
        if start <= PENDING_BYTE <= last:
            names.append("PENDING")
        if start <= RESERVED_BYTE <= last:
            names.append("RESERVED")
        if start <= SHARED_FIRST + SHARED_SIZE - 1 and last >= SHARED_FIRST:
            names.append("SHARED")
        if start < PENDING_BYTE or last > SHARED_FIRST + SHARED_SIZE - 1:
            names.append(f"db bytes {_span(start, end)}")
        return names
    return [f"wal bytes {_span(start, end)}"]


# --- processes ------------------------------------------------------------------------------


def command_line(pid: int, proc: Path = PROC) -> str:
    """Return a process's command line (argv[0] basename and arguments), at most 80 chars."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return NO_COMMAND
    args = [a for a in raw.decode("utf-8", "replace").split("\0") if a]
    if not args:
        return NO_COMMAND
    args[0] = os.path.basename(args[0]) or args[0]
    text = " ".join(" ".join(args).split())
    return text if len(text) <= CMDLINE_MAX else text[: CMDLINE_MAX - 1] + "…"


def _watched(db_path: Path) -> dict[tuple[int, int], str]:
    """Map (st_dev, st_ino) of the existing store files to their file names."""
    found = {}
    for suffix in WATCHED_SUFFIXES:
        path = Path(str(db_path) + suffix)
        try:
            st = os.stat(path)  # follows symlinks: we want the inode SQLite locks
        except OSError:
            continue
        found[(st.st_dev, st.st_ino)] = path.name
    return found


def _suffix_of(name: str, db_name: str) -> str:
    """Return a store file's suffix relative to the database name ('', '-wal', '-shm')."""
    return name[len(db_name) :] if name.startswith(db_name) else ""


def _scan_open_files(
    watched: dict[tuple[int, int], str], proc: Path
) -> tuple[dict[int, set[str]], list[int]]:
    """Find processes with a watched file open; return ({pid: names}, uninspectable pids)."""
    basenames = {name for name in watched.values()}
    opened: dict[int, set[str]] = {}
    uninspectable: list[Any] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return opened, uninspectable
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        fd_dir = proc / entry / "fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            continue  # exited while we looked
        except OSError:
            uninspectable.append(pid)
            continue
        denied = False
        for fd in fds:
            link = fd_dir / fd
            try:
                target = os.readlink(link)
            except FileNotFoundError:
                continue  # descriptor closed meanwhile
            except OSError:
                denied = True
                continue
            # Cheap name filter first, then confirm by inode (paths differ across mounts).
            if os.path.basename(target.removesuffix(" (deleted)")) not in basenames:
                continue
            try:
                st = os.stat(link)
            except FileNotFoundError:
                continue
            except OSError:
                denied = True
                continue
            name = watched.get((st.st_dev, st.st_ino))
            if name is not None:
                opened.setdefault(pid, set()).add(name)
        if denied:
            uninspectable.append(pid)
    return opened, sorted(uninspectable)


def lock_holders(db_path: str | os.PathLike[str], *, proc: Path = PROC) -> LockReport:
    """Report who holds SQLite locks on, or has open, the store at db_path (Linux only)."""
    db_path = Path(db_path).expanduser().absolute()
    locks_file = proc / "locks"
    if not sys.platform.startswith("linux") or not locks_file.exists():
        return LockReport(
            db_path,
            supported=False,
            note="lock holders can only be listed on Linux (from /proc/locks)",
        )
    watched = _watched(db_path)
    report = LockReport(db_path, supported=True, files=sorted(watched.values()))
    if not watched:
        report.note = f"no store files at {db_path}"
        return report
    try:
        records = parse_proc_locks(locks_file.read_text(errors="replace"))
    except OSError as exc:
        report.note = f"could not read {locks_file}: {exc}"
        records = []
    by_dev_ino = {(os.major(dev), os.minor(dev), ino): name for (dev, ino), name in watched.items()}
    commands: dict[int, str] = {}
    locked: dict[int, set[str]] = {}
    for rec in records:
        name = by_dev_ino.get((rec.major, rec.minor, rec.inode))
        if name is None:
            continue
        pid: int | None = rec.pid if rec.pid > 0 else None
        if pid is not None and pid not in commands:
            commands[pid] = command_line(pid, proc)
        suffix = _suffix_of(name, db_path.name)
        kinds = (
            ["whole-file flock"]
            if rec.mechanism == "FLOCK"
            else decode_range(suffix, rec.start, rec.end)
        )
        for kind in kinds:
            report.holders.append(
                LockHolder(
                    pid=pid,
                    command=commands.get(pid, "") if pid is not None else "",
                    file=name,
                    kind=kind,
                    access=rec.access,
                    mechanism=rec.mechanism,
                )
            )
        if pid is not None:
            locked.setdefault(pid, set()).add(name)
    opened, report.uninspectable = _scan_open_files(watched, proc)
    for pid in sorted(opened):
        if pid in locked:
            continue  # already listed as a holder
        command = commands.get(pid) or command_line(pid, proc)
        for name in sorted(opened[pid]):
            report.open_files.append(OpenFile(pid=pid, command=command, file=name))
    return report


def describe_write_holders(db_path: Path, waited_s: float, report: LockReport) -> str:
    """Build the one-line WARNING text naming the write-class lock holders."""
    head = f"state.db write lock unavailable for {waited_s:.0f}s ({db_path.name}): "
    if not report.supported:
        return head + report.note
    seen: list[str] = []
    for holder in report.write_holders():
        text = holder.describe()
        if text not in seen:
            seen.append(text)
    if not seen:
        return (
            head + "no write-class lock held at the deadline (the holder released just before it)"
        )
    return head + " | ".join(seen)


def log_write_lock_holders(db_path: str | os.PathLike[str], waited_s: float) -> None:
    """Log ONE WARNING naming who held the write lock when a writer ran out of patience."""
    path = Path(db_path)
    try:
        message = describe_write_holders(path, waited_s, lock_holders(path))
    except Exception as exc:  # diagnostics must never turn a lock timeout into a crash
        message = (
            f"state.db write lock unavailable for {waited_s:.0f}s ({path.name}): "
            f"lock holders could not be inspected ({exc})"
        )
    # A broken logging handler must not raise out of here either.
    with contextlib.suppress(Exception):
        log.warning("%s", message)


def write_holders_text(db_path: str | os.PathLike[str]) -> str:
    """Name the other processes holding write-class locks on the store, with their locks
    ('' if nobody does, or off Linux): 'PID 7 (hermes chat): RESERVED, PENDING'."""
    report = lock_holders(db_path)
    kinds: dict[str, list[str]] = {}
    for holder in report.write_holders():
        if holder.pid == os.getpid():
            continue
        held = kinds.setdefault(holder.who(), [])
        if holder.kind not in held:
            held.append(holder.kind)
    return "; ".join(f"{who}: {', '.join(held)}" for who, held in kinds.items())
