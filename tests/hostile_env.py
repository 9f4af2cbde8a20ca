"""Helpers for tests of a hostile environment: another user's files, a full disk, a read-only
mount, killed runs, archives an attacker edited. Everything is real: real processes, real file
systems (a tmpfs mounted for the test when the suite runs as root), real permissions."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import children

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 65534  # nobody
# As root, permission checks are bypassed; dropping these capabilities makes a root process
# meet file modes and owners like any other user (its uid stays 0, so its python still runs).
UNPRIVILEGED = (
    ("setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner,-chown")
    if IS_ROOT and shutil.which("setpriv")
    else ()
)


def child_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for `python -m hermes_cli` in a child, with HERMES_HOME=home."""
    return children.child_env(home, extra, plain=True)


def hermes(
    *args: str,
    home: Path,
    input: str = "",
    env: dict[str, str] | None = None,
    unprivileged: bool = False,
    umask: int | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run `hermes ARGS` as a real process (optionally without root's file privileges)."""
    prefix: Sequence[str] = ()
    if unprivileged:
        if IS_ROOT and not UNPRIVILEGED:
            pytest.skip("running as root without setpriv: cannot drop file privileges")
        prefix = UNPRIVILEGED
    preexec: Callable[[], Any] | None = None
    if umask is not None:
        mask = umask

        def preexec() -> None:
            os.umask(mask)

    return subprocess.run(
        [*prefix, sys.executable, "-m", "hermes_cli", *args],
        env=child_env(home, env),
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        preexec_fn=preexec,
    )


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], code: int | tuple[int, ...] = 1
) -> str:
    """Require exit code(s), exactly one `Error:` line on stderr and no traceback; return it."""
    codes = code if isinstance(code, tuple) else (code,)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode in codes, (proc.returncode, proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def give_away(path: Path) -> None:
    """Make a file another user's and private to them (unreadable to this suite's children)."""
    if IS_ROOT:
        os.chown(path, OTHER_UID, OTHER_UID)
        os.chmod(path, 0o600)
    else:
        os.chmod(path, 0)


def digest(path: Path) -> str:
    """Return the sha256 of a file (no connection of this process may have it open)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(root: Path) -> dict[str, tuple[str, int]]:
    """Return every path under root with its kind and size (to compare before and after)."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            kind = "dir" if p.is_dir() and not p.is_symlink() else "file"
            out[str(p.relative_to(root))] = (kind, 0 if kind == "dir" else st.st_size)
    return out


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of the given size (e.g. "2m") at where, for a real full disk (root only)."""
    if not IS_ROOT or not sys.platform.startswith("linux"):
        pytest.skip("mounting a small file system needs root on Linux")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        for _ in range(50):
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def remount_read_only(where: Path) -> None:
    """Make a mounted tmpfs read-only."""
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the file system holding directory until at most `leave` bytes are free."""
    filler = directory / "filler.bin"
    with open(filler, "wb") as fp:
        chunk = b"\0" * (64 << 10)
        while shutil.disk_usage(directory).free > leave + len(chunk):
            try:
                fp.write(chunk)
                fp.flush()
            except OSError:
                break
        while shutil.disk_usage(directory).free > leave:
            try:
                fp.write(b"\0" * 512)
                fp.flush()
            except OSError:
                break
    return filler


def kill_when(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float = 60.0
) -> bool:
    """SIGKILL proc as soon as ready() holds; return whether it was killed while running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            return True
        time.sleep(0.002)
    proc.kill()
    proc.wait(timeout=30)
    return False


def start_hermes(*args: str, home: Path) -> subprocess.Popen[bytes]:
    """Start `hermes ARGS` as a background process."""
    return subprocess.Popen(
        [sys.executable, "-m", "hermes_cli", *args],
        env=child_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def rewrite_archive(
    source: Path,
    dest: Path,
    *,
    replace: dict[str, bytes] | None = None,
    add: dict[str, bytes] | None = None,
    kinds: dict[str, str] | None = None,
    manifest_edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Copy an archive as an attacker would: swap or add members, keep the manifest consistent
    (sizes and sha256 recomputed), optionally edit member kinds or anything else in it."""
    replace, add, kinds = replace or {}, add or {}, kinds or {}
    with zipfile.ZipFile(source) as src:
        manifest = json.loads(src.read("manifest.json"))
        members = [
            (i, replace.get(i.filename, src.read(i)))
            for i in src.infolist()
            if i.filename != "manifest.json"
        ]
    with zipfile.ZipFile(dest, "w", allowZip64=True) as out:
        for info, body in members:
            out.writestr(info, body)
            entry = manifest["members"].setdefault(info.filename, {"kind": "file"})
            entry.update(size=len(body), sha256=hashlib.sha256(body).hexdigest())
        for name, body in add.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100600) << 16
            out.writestr(info, body)
            manifest["members"][name] = {
                "size": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "kind": "sqlite" if name.endswith(".db") else "file",
            }
        for name, kind in kinds.items():
            manifest["members"][name]["kind"] = kind
        if manifest_edit is not None:
            manifest_edit(manifest)
        out.writestr("manifest.json", json.dumps(manifest))
    return dest
