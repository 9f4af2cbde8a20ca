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
from support.children import child_env, hermes_argv
from test_vault import make_session

from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault

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


# --- one consistent picture: backup beside a move or return (issue #39, item 2) ---------------


def _paused_return(sid: str, release: Path) -> subprocess.Popen[str]:
    """Start `hermes vault return sid` and wait until it pauses after its live commit, before
    its vault delete (the window where the session is in both stores' files)."""
    proc = subprocess.Popen(
        hermes_argv("vault", "return", sid),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra={vault.PAUSE_ENV: f"returned:{release}"}),
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    line = ""
    while "paused at returned" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    assert "paused at returned" in line
    return proc


def _archived_ids(archive: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Return, for each session id, the stores of the archive that hold it."""
    where: dict[str, list[str]] = {}
    with zipfile.ZipFile(archive) as zf:
        for n, name in enumerate(m for m in zf.namelist() if m.endswith(".db")):
            copy = tmp_path / f"member-{n}.db"
            copy.write_bytes(zf.read(name))
            for sid in _ids(copy):
                where.setdefault(sid, []).append(name)
    return where


def test_backup_during_a_return_waits_for_it_and_holds_every_session_once(
    vaulted: Path, tmp_path: Path
) -> None:
    release = tmp_path / "go"
    ret = _paused_return("b", release)
    backup = subprocess.Popen(
        hermes_argv("backup", "--wait", "60", "--keep", "0", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert backup.stderr is not None
    notice = backup.stderr.readline()
    assert notice.startswith(f"Waiting for up to 60s: the vault is locked by PID {ret.pid} ("), (
        notice
    )
    assert backup.poll() is None  # still waiting: nothing copied while the return runs
    release.touch()
    _, ret_err = ret.communicate(timeout=60)
    assert ret.returncode == 0, ret_err
    out, err = backup.communicate(timeout=60)
    assert backup.returncode == 0, err
    archive = Path(json.loads(out)["archive"])
    where = _archived_ids(archive, tmp_path)
    assert where == {"a": [MEMBER], "a2": [MEMBER], "b": ["state.db"], "c": ["state.db"]}
    with zipfile.ZipFile(archive) as zf:
        recorded = json.loads(zf.read("manifest.json"))["session_ids"]
    assert list(recorded) == ["state.db"] and recorded["state.db"]["count"] == 4
    # And the archive restores whole: every session in exactly one place again.
    _ok(child("vault", "move", "--older-than", "90d", "--yes"))
    _ok(child("restore", str(archive), "--yes"))
    assert _ids(default_db_path()) == {"b", "c"} and _ids(vaulted) == {"a", "a2"}


def test_backup_gives_up_on_a_running_return_after_its_wait(vaulted: Path, tmp_path: Path) -> None:
    release = tmp_path / "go"
    ret = _paused_return("b", release)
    try:
        started = time.monotonic()
        done = child("backup", "--wait", "2")
        took = time.monotonic() - started
    finally:
        release.touch()
        ret.communicate(timeout=60)
    assert done.returncode == 75, done.stderr
    assert took < 10, took
    assert "Waiting for up to 2s: the vault is locked by PID" in done.stderr
    line = assert_one_line_error(done, 75)
    assert "`hermes vault move` or `return` kept the vault of" in line
    assert "no archive was written" in line
    assert not list((vaulted.parent.parent / "backups").glob("*.zip"))
    assert ret.returncode == 0


def test_a_move_or_return_during_a_backup_is_refused_and_names_backup(vaulted: Path) -> None:
    from hermes_state.vault.vault import vault_lock_waiting

    with vault_lock_waiting(vaulted.parent.parent, 1.0):
        done = child("vault", "return", "b")
    line = assert_one_line_error(done)
    assert "`hermes backup`" in line
    assert _ids(vaulted) == {"a", "a2", "b"}


def _drop_from_member(archive: Path, member: str, sid: str, tmp_path: Path) -> Path:
    """Write a copy of archive whose member lost session sid, its manifest's size and sha256
    updated to match (as an archive taken while sessions moved would be): only the sessions
    the manifest recorded tell."""
    import hashlib

    copy = tmp_path / "edited.db"
    out = tmp_path / "lost-one.zip"
    with zipfile.ZipFile(archive) as zf:
        copy.write_bytes(zf.read(member))
        manifest = json.loads(zf.read("manifest.json"))
        others = {n: zf.read(n) for n in zf.namelist() if n not in (member, "manifest.json")}
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
    conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    data = copy.read_bytes()
    manifest["members"][member].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    with zipfile.ZipFile(out, "w") as zf:
        for name, body in others.items():
            zf.writestr(name, body)
        zf.writestr(member, data)
        zf.writestr("manifest.json", json.dumps(manifest))
    return out


def test_restore_refuses_an_archive_whose_stores_lost_a_session(
    vaulted: Path, tmp_path: Path
) -> None:
    from hermes_state.backups.archive_check import verify_backup

    archive = Path(str(_backup()["archive"]))
    lost = _drop_from_member(archive, MEMBER, "b", tmp_path)
    before = (vaulted.read_bytes(), default_db_path().read_bytes())
    done = child("restore", str(lost), "--yes")
    line = assert_one_line_error(done)
    assert "hold 3 of the 4 sessions the manifest lists" in line, line
    assert "Hint: The archive does not hold every session its manifest lists" in done.stderr
    assert (vaulted.read_bytes(), default_db_path().read_bytes()) == before  # nothing changed
    problems = verify_backup(lost).problems
    assert any("hold 3 of the 4 sessions" in p for p in problems), problems
    assert verify_backup(archive).ok  # the untouched archive passes the same check


def test_restore_of_an_archive_from_before_the_session_record_still_works(
    vaulted: Path, tmp_path: Path
) -> None:
    archive = Path(str(_backup()["archive"]))
    older = tmp_path / "older.zip"
    with zipfile.ZipFile(archive) as zf, zipfile.ZipFile(older, "w") as out:
        for name in zf.namelist():
            body = zf.read(name)
            if name == "manifest.json":
                manifest = json.loads(body)
                del manifest["session_ids"]
                body = json.dumps(manifest).encode()
            out.writestr(name, body)
    _ok(child("restore", str(older), "--yes"))
    assert _ids(vaulted) == {"a", "a2", "b"}
