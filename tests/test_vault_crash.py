"""Never in zero places: a `hermes vault move` or `return` killed with SIGKILL at each of its
steps leaves every session visible in exactly one place, and running it again finishes it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from clitools import child
from support.children import child_env, hermes_argv
from test_vault import make_session

from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault

OLD = time.time() - 400 * 86400
ORIGINAL = {"a": 3, "a2": 3, "b": 3, "c": 3}


def _build() -> None:
    with open_store(default_db_path()) as store:
        make_session(store, "a")
        make_session(store, "a2", parent="a")
        make_session(store, "b")
        make_session(store, "c", time.time())


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)


def _visible() -> dict[str, list[tuple[str, int]]]:
    """Where each session is visible (live, or a vault store without it in live), with its
    message count there — what a reader of either place can see."""
    seen: dict[str, list[tuple[str, int]]] = {}
    conn = _ro(default_db_path())
    live = dict(
        conn.execute(
            "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
            " FROM sessions s"
        ).fetchall()
    )
    conn.close()
    for sid, n in live.items():
        seen.setdefault(sid, []).append(("live", n))
    for year, path in vault.vault_paths(default_db_path().parent):
        conn = _ro(path)
        for sid, n in conn.execute(
            "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
            " FROM sessions s"
        ):
            if sid not in live:
                seen.setdefault(sid, []).append((year, n))
        conn.close()
    return seen


def _assert_once_each() -> None:
    seen = _visible()
    assert set(seen) == set(ORIGINAL), seen
    for sid, places in seen.items():
        assert len(places) == 1, (sid, places)
        assert places[0][1] == ORIGINAL[sid], (sid, places)


def _killed(*args: str, step: str) -> None:
    done = subprocess.run(
        hermes_argv(*args),
        capture_output=True,
        text=True,
        env=child_env(extra={vault.CRASH_ENV: step}),
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, (step, done.returncode, done.stderr)


@pytest.mark.parametrize("step", ["created", "copied", "verified", "deleted"])
def test_move_killed_at_each_step_leaves_every_session_once_and_rerun_finishes(
    step: str,
) -> None:
    _build()
    _killed("vault", "move", "--older-than", "90d", "--yes", step=step)
    _assert_once_each()
    again = child("vault", "move", "--older-than", "90d", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    _assert_once_each()
    assert {sid for sid, p in _visible().items() if p[0][0] == "live"} == {"c"}
    checked = child("vault", "check", "--json")
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("step", ["returned", "unvaulted"])
def test_return_killed_at_each_step_leaves_every_session_once_and_rerun_finishes(
    step: str,
) -> None:
    _build()
    assert child("vault", "move", "--older-than", "90d", "--yes").returncode == 0
    _killed("vault", "return", "b", step=step)
    _assert_once_each()
    again = child("vault", "return", "b")
    assert again.returncode == 0 or step == "unvaulted", again.stderr
    _assert_once_each()
    assert _visible()["b"][0][0] == "live"
    assert child("vault", "check").returncode == 0


def test_a_session_changed_during_the_move_stays_live_and_its_copy_goes(tmp_path: Path) -> None:
    _build()
    release = tmp_path / "go"
    proc = subprocess.Popen(
        hermes_argv("vault", "move", "--older-than", "90d", "--yes", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra={vault.PAUSE_ENV: f"verified:{release}"}),
    )
    assert proc.stderr is not None
    line = ""
    deadline = time.monotonic() + 30
    while "paused at verified" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    from hermes_state.records.messages import append_messages

    with open_store(default_db_path()) as store:  # the agent writes to b meanwhile
        append_messages(store, "b", [{"role": "user", "content": "one more"}])
    release.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    import json

    result = json.loads(out)
    assert result["changed"] == ["b"] and sorted(result["session_ids"]) == ["a", "a2"]
    seen = _visible()
    assert seen["b"] == [("live", 4)]
    assert child("vault", "check").returncode == 0


def test_a_second_move_at_once_is_refused(tmp_path: Path) -> None:
    _build()
    release = tmp_path / "go"
    proc = subprocess.Popen(
        hermes_argv("vault", "move", "--older-than", "90d", "--yes"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra={vault.PAUSE_ENV: f"copied:{release}"}),
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while "paused at copied" not in proc.stderr.readline() and time.monotonic() < deadline:
        pass
    second = child("vault", "move", "--older-than", "90d", "--yes")
    release.touch()
    proc.communicate(timeout=60)
    assert second.returncode == 1 and "another `hermes vault move`" in second.stderr
    _assert_once_each()


# --- a hot journal in a vault store (issue #39, item 6) ---------------------------------------

# A writer of the vault store killed mid-transaction: its page cache of one page spills the
# changed pages into the file before any commit, so only the journal holds the committed state.
HOT_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN")
conn.execute("UPDATE messages SET content = 'CHANGED ' || content")
conn.execute("DELETE FROM messages WHERE session_id = 'b'")
conn.execute("DELETE FROM sessions WHERE id = 'b'")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _vault_store() -> Path:
    [(_year, path)] = vault.vault_paths(default_db_path().parent)
    return path


def _committed(path: Path) -> list[tuple[str, str]]:
    conn = _ro(path)
    try:
        return conn.execute("SELECT session_id, content FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


def _leave_hot_journal(path: Path) -> None:
    """Kill a writer of the store mid-transaction; check it left a journal the file needs."""
    done = subprocess.run([sys.executable, "-c", HOT_WRITER, str(path)], env=child_env())
    assert done.returncode == -signal.SIGKILL
    journal = path.with_name(path.name + "-journal")
    assert journal.stat().st_size > 0
    # The file alone (journal ignored) holds the killed writer's changes: a reader that
    # does not roll the journal back would see them.
    raw = sqlite3.connect(path.resolve().as_uri() + "?immutable=1", uri=True)
    try:
        changed = raw.execute("SELECT count(*) FROM messages WHERE content LIKE 'CHANGED %'")
        assert changed.fetchone()[0] > 0
    finally:
        raw.close()


@pytest.fixture
def hot_vault() -> tuple[Path, list[tuple[str, str]]]:
    """A profile whose vault store has a hot journal a killed writer left; returns the store
    and what it held at its last commit."""
    _build()
    assert child("vault", "move", "--older-than", "90d", "--yes").returncode == 0
    path = _vault_store()
    committed = _committed(path)
    assert {sid for sid, _c in committed} == {"a", "a2", "b"}
    _leave_hot_journal(path)
    return path, committed


def _rolled_back(path: Path, committed: list[tuple[str, str]]) -> None:
    journal = path.with_name(path.name + "-journal")
    assert not journal.exists() or journal.stat().st_size == 0
    assert _committed(path) == committed
    conn = _ro(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


@pytest.mark.parametrize(
    "args",
    [
        ("vault", "list", "--json"),
        ("sessions", "list", "--vault", "--json"),
        ("sessions", "search", "docker", "--json"),
        ("backup", "--keep", "0", "--json"),
    ],
    ids=["vault-list", "sessions-list-vault", "sessions-search", "backup"],
)
def test_a_hot_journal_in_a_vault_store_is_rolled_back_by_the_first_command_that_reads_it(
    hot_vault: tuple[Path, list[tuple[str, str]]], args: tuple[str, ...], tmp_path: Path
) -> None:
    path, committed = hot_vault
    done = child(*args)
    assert done.returncode == 0, done.stderr
    assert "journal" not in done.stderr
    _rolled_back(path, committed)
    import json

    answer = json.loads(done.stdout)
    if args[0] == "backup":
        with zipfile.ZipFile(answer["archive"]) as zf:
            (tmp_path / "member.db").write_bytes(zf.read(f"vault/{path.name}"))
        assert _committed(tmp_path / "member.db") == committed
    elif args[:2] == ("vault", "list"):
        [year] = answer["stores"]
        assert year["session_count"] == 3 and year["message_count"] == 9
    else:
        shown = {row.get("session_id") or row.get("id") for row in answer[_rows_key(answer)]}
        assert "b" in shown  # the vaulted session the killed writer was deleting


def _rows_key(answer: dict[str, object]) -> str:
    return "hits" if "hits" in answer else "sessions"


def test_mcp_search_reads_a_vault_store_with_a_hot_journal(
    hot_vault: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    from test_mcp import data
    from test_mcp_vault import call

    path, committed = hot_vault
    (found,) = call(tmp_path, ("search_messages", {"query": "docker", "limit": 50}))
    hits = data(found)["hits"]
    assert {h["session_id"] for h in hits if h["vault"]} == {"a", "a2", "b"}
    _rolled_back(path, committed)


def test_a_hot_journal_the_reader_cannot_roll_back_names_the_vault_journal(
    hot_vault: tuple[Path, list[tuple[str, str]]],
) -> None:
    # What a read-only open says when nothing rolled the journal back first (a user who may
    # not write in the vault directory): the vault store's own journal, not state.db's.
    from hermes_state.store.errors import HotJournalError

    path, committed = hot_vault
    with pytest.raises(HotJournalError) as caught:
        open_store(path, read_only=True, role="edit", create=False)
    hint = caught.value.hint
    assert f"vault/{path.name}-journal" in hint and "hermes vault list" in hint
    assert "state.db-journal" not in hint and "sessions pin" not in hint
    with vault.open_vault(path, read_only=True) as store:  # the vault's own opener rolls back
        assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 9
    _rolled_back(path, committed)


def test_restore_reads_a_vault_store_with_a_hot_journal_as_it_was_committed() -> None:
    import json

    _build()
    assert child("vault", "move", "--older-than", "90d", "--yes").returncode == 0
    made = child("backup", "--json")
    assert made.returncode == 0, made.stderr
    path = _vault_store()
    _leave_hot_journal(path)
    done = child("restore", json.loads(made.stdout)["archive"], "--yes", "--json")
    assert done.returncode == 0, done.stderr
    [change] = [c for c in json.loads(done.stdout)["plan"]["databases"] if "vault/" in c["name"]]
    assert change["before_problem"] is None
    assert change["before"]["sessions"] == 3 and change["before"]["messages"] == 9
    assert {sid for sid, _c in _committed(path)} == {"a", "a2", "b"}
