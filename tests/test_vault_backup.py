"""Backup, restore and recover carry the vault (SPEC §21): `hermes backup` archives every vault
store as it archives the store, `hermes restore` puts them back with the same checks, both leave
it out with --no-vault, and `hermes sessions recover` salvages a vault store like the live one.
All through the real `hermes` process."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from clitools import child
from hostile_env import assert_one_line_error
from test_vault import make_session

from hermes_state import vault
from hermes_state.connection import open_store
from hermes_state.home import default_db_path

OLD = time.time() - 400 * 86400
YEAR = vault.year_of(OLD)
MEMBER = f"vault/{YEAR}.db"


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)


def _ids(path: Path) -> set[str]:
    conn = _ro(path)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (done.stdout, done.stderr)


@pytest.fixture
def vaulted(hermes_home: Path) -> Path:
    """A profile with an old chain and an old single moved into the vault, a recent one live;
    returns the vault store."""
    with open_store(default_db_path()) as store:
        make_session(store, "a", title="Chain")
        make_session(store, "a2", parent="a")
        make_session(store, "b")
        make_session(store, "c", time.time())
    _ok(child("vault", "move", "--older-than", "90d", "--yes"))
    path = hermes_home / MEMBER
    assert _ids(path) == {"a", "a2", "b"}
    return path


def _backup(*args: str) -> dict[str, object]:
    done = child("backup", "--keep", "0", "--json", *args)
    _ok(done)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_backup_archives_each_vault_store_with_its_counts(vaulted: Path, tmp_path: Path) -> None:
    (vaulted.parent / f".{YEAR}.db.new-4242").write_bytes(b"half made by a killed move")
    result = _backup()
    assert result["vault"] == {MEMBER: {"sessions": 3, "messages": 9}}
    with zipfile.ZipFile(str(result["archive"])) as zf:
        names = set(zf.namelist())
        manifest = json.loads(zf.read("manifest.json"))
        (tmp_path / "copy.db").write_bytes(zf.read(MEMBER))
    assert {"state.db", MEMBER} <= names
    assert not any(".new-" in n or n.endswith(".lock") for n in names), names
    assert manifest["vault_included"] is True
    assert manifest["vault"] == {MEMBER: {"sessions": 3, "messages": 9}}
    assert manifest["members"][MEMBER]["kind"] == "sqlite"
    conn = _ro(tmp_path / "copy.db")
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (9,)
    conn.close()


def test_backup_list_shows_the_vault_stores_of_each_archive(vaulted: Path) -> None:
    _backup()
    listed = json.loads(child("backup", "list", "--json").stdout)
    [archive] = listed["archives"]
    assert (archive["vault_stores"], archive["vault_sessions"], archive["vault_messages"]) == (
        1,
        3,
        9,
    )
    assert (archive["sessions"], archive["messages"]) == (1, 3)  # the live store alone
    shown = child("backup", "list", env={"COLUMNS": "200"})
    assert "vault: 1 store, 3 sessions" in shown.stdout, shown.stdout


def test_backup_with_no_vault_leaves_the_vault_out(vaulted: Path) -> None:
    result = _backup("--no-vault")
    assert result["vault"] == {}
    with zipfile.ZipFile(str(result["archive"])) as zf:
        assert not [n for n in zf.namelist() if n.startswith("vault/")]
        assert json.loads(zf.read("manifest.json"))["vault_included"] is False


def test_restore_puts_the_vault_back_and_keeps_the_replaced_store(vaulted: Path) -> None:
    archive = str(_backup()["archive"])
    _ok(child("vault", "return", "b"))
    assert _ids(vaulted) == {"a", "a2"}
    done = child("restore", archive, "--yes", "--json")
    _ok(done)
    result = json.loads(done.stdout)
    assert MEMBER in result["databases"]
    kept = Path(result["pre_restore"][MEMBER])
    assert kept.name.startswith(f"{YEAR}.db.pre-restore-") and _ids(kept) == {"a", "a2"}
    assert _ids(vaulted) == {"a", "a2", "b"}
    assert _ids(default_db_path()) == {"c"}  # the archive's moment: b was in the vault
    assert [p.name for _y, p in vault.vault_paths(vaulted.parent.parent)] == [f"{YEAR}.db"]
    checked = child("vault", "check", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"], checked.stdout


def test_restore_plan_counts_the_vault_store_before_and_after(vaulted: Path) -> None:
    archive = str(_backup()["archive"])
    _ok(child("vault", "return", "b"))
    done = child("restore", archive, input="n\n")
    assert done.returncode == 1 and "Aborted" in done.stderr
    assert f"{MEMBER}: now 2 sessions, 6 messages" in done.stdout
    assert "-> 3 sessions, 9 messages" in done.stdout
    assert _ids(vaulted) == {"a", "a2"}  # nothing changed


def test_restore_with_no_vault_leaves_the_vault_as_it_is(vaulted: Path) -> None:
    archive = str(_backup()["archive"])
    _ok(child("vault", "return", "b"))
    before = vaulted.read_bytes()
    done = child("restore", archive, "--no-vault", "--yes", "--json")
    _ok(done)
    result = json.loads(done.stdout)
    assert result["databases"] == ["state.db"]
    assert result["plan"]["vault_left_out"] == [MEMBER]
    assert vaulted.read_bytes() == before
    assert not list(vaulted.parent.glob("*.pre-restore-*"))


def test_restore_refuses_a_vault_store_with_a_foreign_trigger(vaulted: Path) -> None:
    conn = sqlite3.connect(vaulted)
    conn.execute("CREATE TRIGGER evil AFTER INSERT ON messages BEGIN SELECT 1; END")
    conn.commit()
    conn.close()
    archive = str(_backup()["archive"])
    before = vaulted.read_bytes()
    done = child("restore", archive, "--yes")
    line = assert_one_line_error(done)
    assert MEMBER in line and "triggers or views no Hermes release defines" in line
    assert vaulted.read_bytes() == before


def test_recover_salvages_a_vault_store_like_the_live_one(vaulted: Path, tmp_path: Path) -> None:
    before = vaulted.read_bytes()
    target = tmp_path / "recovered.db"
    done = child("sessions", "recover", "--from", str(vaulted), "--to", str(target), "--json")
    _ok(done)
    report = json.loads(done.stdout)
    assert report["complete"] and report["verification"]["ok"] and report["source_unchanged"]
    assert report["excluded"] == dict.fromkeys(report["excluded"], 0)  # the ledger, as for live
    assert vaulted.read_bytes() == before  # never writes to its source
    assert _ids(target) == {"a", "a2", "b"}
    conn = _ro(target)
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (9,)
    hits = conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'docker'")
    assert hits.fetchone() == (9,)
    conn.close()


def test_no_vault_is_an_option_of_making_a_backup_not_of_listing(vaulted: Path) -> None:
    done = child("backup", "list", "--no-vault")
    assert_one_line_error(done, 2)
    assert "--no-vault" in done.stderr
