"""Search indexes: the layout a new store gets, sync triggers, rebuild gating, our CJK index,
and the agent's own layouts kept as they are."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.upstream30 import build_upstream30

from hermes_state.records import messages, sessions
from hermes_state.store import cjk, fts, meta
from hermes_state.store.connection import Store, open_store


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A writable store with one session, s1."""
    with open_store(db_path) as handle:
        sessions.create_session(handle, "s1", "cli")
        yield handle


def add(store: Store, content: str | None, role: str = "user", **fields: object) -> int:
    """Append one message to session s1; return its id."""
    return messages.append_message(store, "s1", role, content, **fields)


def word_hits(conn: sqlite3.Connection, query: str) -> list[int]:
    """Return the ids the word index matches for an FTS5 query."""
    rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (query,))
    return sorted(r[0] for r in rows)


def trigram_hits(conn: sqlite3.Connection, fragment: str) -> list[int]:
    """Return the ids the trigram index holds for a substring."""
    rows = conn.execute(
        "SELECT rowid FROM messages_fts_trigram WHERE content LIKE ?", (f"%{fragment}%",)
    )
    return sorted(r[0] for r in rows)


def cjk_hits(conn: sqlite3.Connection, word: str) -> list[int]:
    """Return the ids the CJK index matches for a CJK word."""
    rows = conn.execute(
        "SELECT rowid FROM hermes_cjk WHERE hermes_cjk MATCH ?", (cjk.cjk_match_expr(word),)
    )
    return sorted(r[0] for r in rows)


def fts_segments(conn: sqlite3.Connection) -> tuple:
    """A fingerprint of every FTS index's stored segments (changes whenever FTS is written)."""
    return tuple(
        tuple(conn.execute(f"SELECT id, block FROM {t}_data ORDER BY id").fetchall())
        for t in (*fts.INDEX_TABLES, cjk.TABLE)
    )


def drop_sync_triggers(conn: sqlite3.Connection) -> None:
    """Remove the word/substring sync triggers (as a writer that lost them would)."""
    for name in fts.EXTERNAL_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


# --- layout --------------------------------------------------------------------------------


def test_fresh_store_gets_the_agents_external_layout_and_our_cjk_index(store: Store) -> None:
    idx = fts.indexes(store.conn)
    assert fts.layout_of(store.conn) == "external"
    assert idx.word is not None and idx.word.content == fts.WORD_SOURCE
    assert idx.trigram is not None and idx.trigram.columns == ("content", "tool_name")
    assert idx.trigram.tokenizer == "trigram" and idx.trigram.detail == "full"
    assert cjk.is_installed(store.conn)
    assert fts.integrity_check(store.conn) == []


def test_a_new_store_has_the_six_trigger_names_every_release_checks_for(store: Store) -> None:
    names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
    assert set(fts.BASE_TRIGGERS) <= names
    assert len(fts.BASE_TRIGGERS) == 6


def test_reopen_repairs_a_missing_trigger_and_indexes_missed_rows(
    db_path: Path, store: Store
) -> None:
    store.conn.execute("DROP TRIGGER messages_fts_insert")
    missed = add(store, "written while the trigger was gone")
    store.close()
    with open_store(db_path) as again:
        assert "messages_fts_insert" in {
            r[0] for r in again.conn.execute("SELECT name FROM sqlite_master")
        }
        assert word_hits(again.conn, "trigger") == [missed]
        assert fts.integrity_check(again.conn) == []


# --- sync triggers ---------------------------------------------------------------------------


def test_insert_is_indexed_by_words_and_substrings(store: Store) -> None:
    mid = add(store, "the docker build failed")
    assert word_hits(store.conn, "docker") == [mid]
    assert trigram_hits(store.conn, "ocker bu") == [mid]


def test_tool_name_and_tool_calls_are_word_indexed(store: Store) -> None:
    mid = add(
        store,
        None,
        role="assistant",
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "kubectl_apply"}}],
    )
    tid = add(store, "ok", role="tool", tool_name="terminal", tool_call_id="c1")
    assert word_hits(store.conn, "kubectl_apply") == [mid]
    assert word_hits(store.conn, "tool_name:terminal") == [tid]


def test_tool_rows_stay_out_of_the_trigram_index(store: Store) -> None:
    add(store, "deadbeefcafe output", role="tool", tool_name="terminal")
    assert trigram_hits(store.conn, "beefca") == []


def test_cron_and_subagent_sessions_stay_out_of_the_trigram_index(store: Store) -> None:
    sessions.create_session(store, "c1", "cron")
    sessions.create_session(store, "d1", "cli", model_config={"_delegate_from": "s1"})
    messages.append_message(store, "c1", "user", "nightly kubernetes digest")
    messages.append_message(store, "d1", "user", "delegated kubernetes chore")
    kept = add(store, "interactive kubernetes question")
    assert trigram_hits(store.conn, "ubernet") == [kept]
    assert len(word_hits(store.conn, "kubernetes")) == 3


def test_flipping_active_or_compacted_never_touches_fts(store: Store) -> None:
    mid = add(store, "keep me searchable")
    before = fts_segments(store.conn)
    store.conn.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (mid,))
    store.conn.execute("UPDATE messages SET content = content WHERE id = ?", (mid,))
    assert fts_segments(store.conn) == before


def test_content_update_replaces_indexed_words(store: Store) -> None:
    mid = add(store, "alpha words")
    store.conn.execute("UPDATE messages SET content = 'omega words' WHERE id = ?", (mid,))
    assert word_hits(store.conn, "alpha") == []
    assert word_hits(store.conn, "omega") == [mid]
    assert trigram_hits(store.conn, "mega") == [mid]


def test_delete_removes_row_from_every_index(store: Store) -> None:
    mid = add(store, "東京 temporary words")
    store.conn.execute("DELETE FROM messages WHERE id = ?", (mid,))
    assert word_hits(store.conn, "temporary") == []
    assert trigram_hits(store.conn, "empor") == []
    assert cjk_hits(store.conn, "東京") == []


def test_integrity_check_clean_after_insert_update_delete_churn(store: Store) -> None:
    ids = [add(store, f"message {i} 会議 number{i % 7}") for i in range(60)]
    for i, mid in enumerate(ids):
        if i % 3 == 0:
            store.conn.execute("UPDATE messages SET content = ? WHERE id = ?", (f"edit {i}", mid))
        elif i % 3 == 1:
            store.conn.execute("DELETE FROM messages WHERE id = ?", (mid,))
        else:
            store.conn.execute("UPDATE messages SET role = 'tool' WHERE id = ?", (mid,))
    cjk.after_append(store.conn)
    assert fts.integrity_check(store.conn) == []
    assert cjk.integrity_problems(store.conn) == []


def test_integrity_check_reports_an_index_out_of_step(store: Store) -> None:
    mid = add(store, "original text")
    drop_sync_triggers(store.conn)
    store.conn.execute(
        "UPDATE messages SET content = 'changed behind its back' WHERE id = ?", (mid,)
    )
    problems = fts.integrity_check(store.conn)
    assert any("messages_fts" in p for p in problems)


def test_integrity_check_reports_a_row_missing_from_the_index(store: Store) -> None:
    drop_sync_triggers(store.conn)
    add(store, "never indexed")
    assert any("missing from the index" in p for p in fts.integrity_check(store.conn))


# --- rebuild gating ------------------------------------------------------------------------


def _fill(store: Store, n: int) -> list[int]:
    """Append n messages containing "needle"; return their ids."""
    return messages.append_messages(
        store, "s1", [{"role": "user", "content": f"row {i} needle"} for i in range(n)]
    )


def test_triggers_skip_rows_inside_the_rebuild_window(store: Store) -> None:
    ids = _fill(store, 10)
    store.write(fts.start_chunked_rebuild)
    store.conn.execute("UPDATE messages SET content = 'changed needle' WHERE id = ?", (ids[5],))
    assert word_hits(store.conn, "needle") == []  # window rows wait for the rebuild
    new = add(store, "fresh needle")
    assert word_hits(store.conn, "needle") == [new]  # above the high water: indexed at once


def test_rebuild_step_advances_progress_with_its_chunk(store: Store) -> None:
    ids = _fill(store, 10)
    store.write(fts.start_chunked_rebuild)
    step = store.write(lambda conn: fts.rebuild_step(conn, chunk=4))
    assert (step.progress, step.done) == (4, False)
    assert fts.indexes(store.conn).progress == 4
    assert word_hits(store.conn, "needle") == ids[:4]


def test_rolled_back_step_leaves_progress_and_index_unchanged(store: Store) -> None:
    _fill(store, 10)
    store.write(fts.start_chunked_rebuild)
    conn = store.conn
    conn.execute("BEGIN IMMEDIATE")
    fts.rebuild_step(conn, chunk=4)
    conn.execute("ROLLBACK")
    assert fts.indexes(conn).progress == 0
    assert word_hits(conn, "needle") == []


def test_rebuild_indexes_every_row_once_while_a_writer_appends(store: Store) -> None:
    ids = _fill(store, 25)
    appended: list[int] = []
    store.write(fts.start_chunked_rebuild)
    store.conn.execute("UPDATE messages SET content = 'edited needle' WHERE id = ?", (ids[20],))

    def writer(step: fts.RebuildProgress) -> None:
        """Append a message between rebuild chunks, as a live writer would."""
        if not step.done:
            appended.append(add(store, "appended needle 東京"))

    done = fts.finish_rebuild(store, chunk=5, on_progress=writer)
    assert done.done and appended
    assert word_hits(store.conn, "needle") == sorted(ids + appended)
    assert word_hits(store.conn, "edited") == [ids[20]]
    assert fts.integrity_check(store.conn) == []
    assert not fts.rebuild_pending(store.conn)


def test_rebuild_now_restores_an_emptied_index(store: Store) -> None:
    ids = _fill(store, 5)
    store.conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    store.write(fts.rebuild_now)
    assert word_hits(store.conn, "needle") == ids
    assert fts.integrity_check(store.conn) == []


def test_optimize_gives_space_back_after_large_deletes(store: Store) -> None:
    for _ in range(10):
        messages.append_messages(
            store, "s1", [{"role": "user", "content": f"bulk text {i} " * 20} for i in range(30)]
        )
    store.conn.execute("DELETE FROM messages WHERE id > 10")

    def size() -> int:
        """Return the bytes stored in the word index segments."""
        return store.conn.execute("SELECT SUM(length(block)) FROM messages_fts_data").fetchone()[0]

    before = size()
    store.write(fts.optimize)
    assert size() < before / 2
    assert fts.integrity_check(store.conn) == []


# --- an index the agent detached (fts_stale) -------------------------------------------------


def _detach(store: Store) -> None:
    """Do what the agent does to an index it found damaged: flag it and drop its triggers."""

    def fn(conn: sqlite3.Connection) -> None:
        meta.put(conn, fts.STALE_KEY, "1")
        for name in fts.EXTERNAL_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")

    store.write(fn)


def test_detached_store_accepts_writes_and_our_agent_open_rebuilds_it(
    db_path: Path, store: Store
) -> None:
    _detach(store)
    mid = add(store, "written while stale")
    assert word_hits(store.conn, "stale") == []
    assert fts.integrity_check(store.conn)  # reported, not hidden
    store.close()
    with open_store(db_path) as again:
        assert word_hits(again.conn, "stale") == [mid]
        assert meta.get(again.conn, fts.STALE_KEY) is None
        assert fts.integrity_check(again.conn) == []


def test_an_edit_open_leaves_a_detached_index_to_the_agent(db_path: Path, store: Store) -> None:
    _detach(store)
    store.close()
    with open_store(db_path, role="edit") as edit:
        assert meta.get(edit.conn, fts.STALE_KEY) == "1"
        assert "messages_fts_insert" not in {
            r[0] for r in edit.conn.execute("SELECT name FROM sqlite_master")
        }


# --- CJK -----------------------------------------------------------------------------------


def test_cjk_grams_are_bigrams_plus_last_unigram() -> None:
    assert cjk.cjk_grams("meet 東京都 at 会議。ok 人") == "東京 京都 都 会議 議 人"


def test_cjk_punctuation_breaks_runs() -> None:
    assert cjk.cjk_runs("東京、大阪「会議」") == ["東京", "大阪", "会議"]


def test_cjk_match_expr_for_one_two_and_three_characters() -> None:
    assert cjk.cjk_match_expr("東") == '"東"*'
    assert cjk.cjk_match_expr("東京") == '"東京"'
    assert cjk.cjk_match_expr("東京都") == '"東京 京都"'


def test_append_indexes_cjk_words_of_one_and_two_characters(store: Store) -> None:
    mid = add(store, "明日は東京で会議 meeting about 数据库")
    other = add(store, "plain english only")
    assert cjk_hits(store.conn, "東京") == [mid]
    assert cjk_hits(store.conn, "数据") == [mid]
    assert cjk_hits(store.conn, "議") == [mid]  # last character of a run
    assert cjk_hits(store.conn, "東") == [mid]
    assert store.conn.execute("SELECT count(*) FROM hermes_cjk").fetchone()[0] == 1
    assert other not in cjk_hits(store.conn, "京")


def test_cjk_content_update_is_queued_and_reindexed(store: Store) -> None:
    mid = add(store, "東京")
    store.conn.execute("UPDATE messages SET content = '大阪' WHERE id = ?", (mid,))
    assert cjk_hits(store.conn, "東京") == []
    assert cjk.status(store.conn).pending == 1
    cjk.catch_up(store.conn)
    assert cjk_hits(store.conn, "大阪") == [mid]
    assert cjk.status(store.conn).pending == 0


def test_insert_below_cjk_high_water_is_queued(store: Store) -> None:
    add(store, "x")
    add(store, "y")
    store.conn.execute("DELETE FROM messages WHERE id = 1")
    store.conn.execute(
        "INSERT INTO messages (id, session_id, role, content, timestamp) "
        "VALUES (1, 's1', 'user', '会議 again', 0)"
    )
    cjk.after_append(store.conn)
    assert cjk_hits(store.conn, "会議") == [1]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell")
def test_foreign_shell_insert_succeeds_and_is_caught_up_by_next_append(
    db_path: Path, store: Store
) -> None:
    sql = (
        "INSERT INTO messages (session_id, role, content, timestamp) "
        "VALUES ('s1', 'user', '会議の資料 from the shell', 1.0);"
    )
    done = subprocess.run(["sqlite3", str(db_path), sql], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    foreign = store.conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    assert word_hits(store.conn, "shell") == [foreign]  # SQL triggers ran in the shell
    assert cjk_hits(store.conn, "会議") == []
    add(store, "a later library append")
    assert cjk_hits(store.conn, "会議") == [foreign]
    assert cjk_hits(store.conn, "資料") == [foreign]


def test_after_append_leaves_a_store_without_our_cjk_index_alone(store: Store) -> None:
    store.write(lambda conn: meta.delete(conn, cjk.HIGH_WATER_KEY))
    add(store, "東京")
    assert store.conn.execute("SELECT count(*) FROM hermes_cjk").fetchone()[0] == 0


# --- the agent's own layouts -----------------------------------------------------------------

UPSTREAM_CJK = [
    "CREATE VIEW messages_fts_cjk_src AS SELECT id, content, tool_name, tool_calls "
    "FROM messages WHERE role <> 'tool'",
    "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls, "
    "content='messages_fts_cjk_src', content_rowid='id', tokenize='unicode61')",
    "CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages WHEN new.role <> 'tool' "
    "BEGIN INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls) "
    "VALUES (new.id, new.content, new.tool_name, new.tool_calls); END",
]


def add_upstream_fts(path: Path, extra_rows: int = 0, *, with_cjk: bool = True) -> int:
    """Give a schema-30 store the agent's FTS layout (and its CJK table needing cjk_unicode61)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        sid = conn.execute("SELECT id FROM sessions ORDER BY rowid LIMIT 1").fetchone()[0]
        cols = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        for i in range(extra_rows):
            values = {"session_id": sid, "role": "user", "content": f"upstream row {i} 東京"}
            values["timestamp"] = 1.0
            names = [c for c in values if c in cols]
            conn.execute(
                f"INSERT INTO messages ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [values[c] for c in names],
            )
        for ddl in fts.EXTERNAL_DDL.values():
            conn.execute(ddl)
        for table in fts.INDEX_TABLES:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        if with_cjk:
            for ddl in UPSTREAM_CJK:
                conn.execute(ddl)
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = replace(sql, 'unicode61', 'cjk_unicode61') "
                "WHERE name = 'messages_fts_cjk'"
            )
            conn.execute("PRAGMA writable_schema = OFF")
        conn.execute("COMMIT")
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def test_upstream_fixture_blocks_plain_inserts(db_path: Path) -> None:
    build_upstream30(db_path)
    add_upstream_fts(db_path)
    conn = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such tokenizer"):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "SELECT session_id, 'user', 'x', 1 FROM messages LIMIT 1"
            )
    finally:
        conn.close()


@pytest.mark.parametrize("newest", [True, False])
def test_the_agents_layout_is_kept_and_its_unloadable_cjk_index_detached_as_it_does(
    db_path: Path, newest: bool
) -> None:
    build_upstream30(db_path, newest=newest)
    total = add_upstream_fts(db_path, extra_rows=5)
    sql_before = {
        n: s
        for n, s in sqlite3.connect(db_path).execute("SELECT name, sql FROM sqlite_master")
        if n.startswith("messages_fts") and not n.startswith("messages_fts_cjk")
    }
    with open_store(db_path) as store:
        conn = store.conn
        after = dict(conn.execute("SELECT name, sql FROM sqlite_master"))
        assert {n: after.get(n) for n in sql_before} == sql_before  # same names, same shapes
        assert "messages_fts_cjk_insert" not in after
        assert meta.get(conn, "fts_cjk_stale") == "1"
        assert conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == total
        assert len(word_hits(conn, "upstream")) == 5
        assert len(cjk_hits(conn, "東京")) == 5
        assert fts.integrity_check(conn) == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        sid = conn.execute("SELECT session_id FROM messages LIMIT 1").fetchone()[0]
        mid = messages.append_message(store, sid, "user", "after the migration 会議")
        assert word_hits(conn, "migration") == [mid]
        assert cjk_hits(conn, "会議") == [mid]


def test_a_large_store_without_search_indexes_gets_them_by_a_chunked_rebuild(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fts, "INLINE_REBUILD_MAX_ROWS", 3)
    build_upstream30(db_path)
    conn = sqlite3.connect(db_path)
    total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    conn.close()
    with open_store(db_path) as store:
        assert fts.rebuild_pending(store.conn)
        fts.finish_rebuild(store, chunk=4)
        assert (
            store.conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == total
        )
        assert fts.integrity_check(store.conn) == []
