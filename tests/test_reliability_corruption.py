"""Reliability: every command on a damaged store fails cleanly and leaves the file alone (§3, §17).

Damage kinds: zero-byte, garbage (no SQLite header), truncated, header fields scrambled (magic
kept), btree leaf pages zeroed, and a stale WAL of an older generation next to a vacuumed file.
Expected: one `Error: …` line with a hint naming `hermes sessions recover`, exit 1, no traceback,
and state.db byte-identical — except that a writable open moves a zero-byte or non-SQLite file
aside (SPEC §3), where the original bytes must be in the .bak file and the user is told.
The full matrix runs in-process through CliRunner; a representative subset runs as processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import error_lines, file_digest, run_cli
from support.damage import DAMAGE_KINDS, QUARANTINED_KINDS, damage
from support.stores import copy_bundle, populate_store, settle
from typer.testing import CliRunner

from hermes_cli.main import build_app

SHOWN = "sess-1-00000"
DELETED = "sess-1-00001"

READ_COMMANDS: dict[str, list[str]] = {
    "sessions-list": ["sessions", "list"],
    "sessions-search": ["sessions", "search", "deploy"],
    "sessions-show": ["sessions", "show", SHOWN],
    "sessions-export": ["sessions", "export", "-o", "-"],
    "sessions-stats": ["sessions", "stats"],
    "db-check": ["db", "check"],
}
# These two never read the database itself: they must keep working on a damaged one.
PATH_COMMANDS: dict[str, list[str]] = {
    "db-path": ["db", "path"],
    "db-lockowners": ["db", "lockowners"],
}
WRITE_COMMANDS: dict[str, list[str]] = {
    "sessions-rename": ["sessions", "rename", SHOWN, "renamed", "title"],
    "sessions-delete": ["sessions", "delete", DELETED, "--yes"],
    "sessions-prune": ["sessions", "prune", "--yes"],
    "db-optimize": ["db", "optimize"],
    "db-migrate": ["db", "migrate"],
}


def _cases(commands: dict[str, list[str]], kinds: tuple[str, ...]) -> list[Any]:
    """Parametrise (kind, command name, argv) over every pair."""
    return [
        pytest.param(kind, name, argv, id=f"{kind}-{name}")
        for kind in kinds
        for name, argv in commands.items()
    ]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One closed store damaged in each way (built once; each test works on a copy)."""
    base = tmp_path_factory.mktemp("damaged")
    pristine = base / "pristine" / "state.db"
    pristine.parent.mkdir()
    populate_store(pristine, sessions_n=4, messages_per_session=40)
    settle(pristine)
    out = {}
    for kind in DAMAGE_KINDS:
        db = base / kind / "state.db"
        copy_bundle(pristine, db)
        damage(db, kind)
        out[kind] = db
    return out


@pytest.fixture
def place(damaged: dict[str, Path], hermes_home: Path) -> Callable[[str], Path]:
    """Put a copy of one damaged store at this test's HERMES_HOME/state.db; return its path."""

    def put(kind: str) -> Path:
        db = hermes_home / "state.db"
        copy_bundle(damaged[kind], db)
        return db

    return put


RUNNER = CliRunner()
APP = build_app()


@pytest.fixture
def invoke() -> Callable[[list[str]], tuple[int, str, str]]:
    """Run the CLI in-process; return (exit code, stdout, stderr), failing on a raised error."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        result = RUNNER.invoke(APP, argv)
        exc = result.exception
        assert exc is None or isinstance(exc, SystemExit), f"Traceback (raised): {exc!r}"
        return result.exit_code, result.stdout, result.stderr

    return run


def assert_clean_store_error(code: int, stdout: str, stderr: str) -> None:
    """One `Error:` line, a hint pointing at `hermes sessions recover`, exit 1, no traceback."""
    assert "Traceback" not in stdout + stderr, stderr
    assert code == 1, (code, stdout, stderr)
    errors = error_lines(stderr)
    assert len(errors) == 1, stderr
    hints = [line for line in stderr.splitlines() if line.startswith("Hint: ")]
    assert any("hermes sessions recover" in h for h in hints), stderr


def digests(db: Path) -> dict[str, str]:
    """Return sha256 of state.db and, when there is one, its -wal (the -shm is SQLite's scratch)."""
    wal = Path(str(db) + "-wal")
    return {p.name: file_digest(p) for p in (db, wal) if p.exists()}


def unchanged(db: Path, before: dict[str, str]) -> bool:
    """Tell whether every file in before is byte-identical and any new -wal is empty.

    Opening a WAL store (even read-only) makes SQLite create its -wal/-shm when they are
    missing; an empty new -wal holds nothing, so only its contents would matter.
    """
    after = digests(db)
    new_wal = db.name + "-wal"
    if new_wal in after and new_wal not in before:
        after.pop(new_wal)
        if os.stat(str(db) + "-wal").st_size:
            return False
    return after == before


def quarantined_copy(db: Path, kind: str) -> Path:
    """Return the single moved-aside file a writable open left next to db."""
    label = {"zero-byte": "zeroed", "garbage": "notadb"}[kind]
    moved = [p for p in db.parent.iterdir() if re.fullmatch(rf"state\.db\.{label}-.*\.bak", p.name)]
    assert len(moved) == 1, sorted(p.name for p in db.parent.iterdir())
    return moved[0]


# --- the matrix, in-process -----------------------------------------------------------------


@pytest.mark.parametrize(("kind", "name", "argv"), _cases(READ_COMMANDS, DAMAGE_KINDS))
def test_read_command_on_damaged_store_fails_cleanly_and_leaves_it_byte_identical(
    kind: str,
    name: str,
    argv: list[str],
    place: Callable[[str], Path],
    invoke: Callable[[list[str]], tuple[int, str, str]],
) -> None:
    db = place(kind)
    before = digests(db)
    code, out, err = invoke(argv)
    assert_clean_store_error(code, out, err)
    assert unchanged(db, before)


@pytest.mark.parametrize(("kind", "name", "argv"), _cases(PATH_COMMANDS, DAMAGE_KINDS))
def test_path_command_on_damaged_store_still_works_and_leaves_it_byte_identical(
    kind: str,
    name: str,
    argv: list[str],
    place: Callable[[str], Path],
    invoke: Callable[[list[str]], tuple[int, str, str]],
) -> None:
    db = place(kind)
    before = digests(db)
    code, out, err = invoke(argv)
    assert "Traceback" not in out + err
    assert code == 0, err
    assert str(db) in out
    assert unchanged(db, before)


@pytest.mark.parametrize(
    ("kind", "name", "argv"),
    _cases(WRITE_COMMANDS, tuple(k for k in DAMAGE_KINDS if k not in QUARANTINED_KINDS)),
)
def test_write_command_on_damaged_store_fails_cleanly_and_leaves_it_byte_identical(
    kind: str,
    name: str,
    argv: list[str],
    place: Callable[[str], Path],
    invoke: Callable[[list[str]], tuple[int, str, str]],
) -> None:
    db = place(kind)
    before = digests(db)
    code, out, err = invoke(argv)
    assert_clean_store_error(code, out, err)
    assert unchanged(db, before)


@pytest.mark.parametrize(("kind", "name", "argv"), _cases(WRITE_COMMANDS, QUARANTINED_KINDS))
def test_write_command_on_headerless_store_refuses_and_leaves_it_in_place(
    kind: str,
    name: str,
    argv: list[str],
    place: Callable[[str], Path],
    invoke: Callable[[list[str]], tuple[int, str, str]],
) -> None:
    # Only the agent's own open may move a store aside; a command never starts a fresh one.
    db = place(kind)
    before = digests(db)
    code, out, err = invoke(argv)
    assert_clean_store_error(code, out, err)
    assert unchanged(db, before)
    assert not list(db.parent.glob(f"{db.name}.*.bak"))


# --- a representative subset as real processes ----------------------------------------------

PROCESS_READS = {name: READ_COMMANDS[name] for name in ("sessions-list", "sessions-search")}


@pytest.mark.parametrize(("kind", "name", "argv"), _cases(PROCESS_READS, DAMAGE_KINDS))
def test_hermes_process_on_damaged_store_prints_one_error_and_exits_1(
    kind: str, name: str, argv: list[str], place: Callable[[str], Path], hermes_home: Path
) -> None:
    db = place(kind)
    before = digests(db)
    proc = run_cli(argv, home=hermes_home)
    assert_clean_store_error(proc.returncode, proc.stdout, proc.stderr)
    assert unchanged(db, before)


@pytest.mark.parametrize("kind", [k for k in DAMAGE_KINDS if k not in QUARANTINED_KINDS])
def test_hermes_rename_process_on_damaged_store_fails_cleanly_and_leaves_it_alone(
    kind: str, place: Callable[[str], Path], hermes_home: Path
) -> None:
    db = place(kind)
    before = digests(db)
    proc = run_cli(WRITE_COMMANDS["sessions-rename"], home=hermes_home)
    assert_clean_store_error(proc.returncode, proc.stdout, proc.stderr)
    assert unchanged(db, before)


@pytest.mark.parametrize("kind", QUARANTINED_KINDS)
def test_hermes_rename_process_on_headerless_store_refuses_and_keeps_it(
    kind: str, place: Callable[[str], Path], hermes_home: Path
) -> None:
    db = place(kind)
    before = digests(db)
    proc = run_cli(WRITE_COMMANDS["sessions-rename"], home=hermes_home)
    assert_clean_store_error(proc.returncode, proc.stdout, proc.stderr)
    assert unchanged(db, before)
