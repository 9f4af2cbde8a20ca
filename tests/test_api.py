"""The library as the agent calls it: the seed document's examples verbatim, the agent's
caller-facing methods and shapes, and a typed surface that refuses a misspelt keyword."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from hermes_state import SessionDB as ExportedSessionDB
from hermes_state.agent.db import SessionDB
from hermes_state.store.errors import SessionNotFoundError, TitleInUseError
from hermes_state.upkeep import prune


@pytest.fixture
def home_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user home of the test's own, so '~' in the seed's examples stays inside tmp_path."""
    home = tmp_path / "user-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_the_seed_documents_common_operations_run_as_written(
    home_dir: Path, hermes_home: Path
) -> None:
    # 初期化
    from hermes_state import SessionDB

    db = SessionDB()  # Default: ~/.hermes/state.db
    assert db.path == hermes_home / "state.db"
    db.close()
    db = SessionDB(db_path=Path("~/.hermes/cache/scratch/test.db").expanduser())  # Custom path
    assert db.path == home_dir / ".hermes" / "cache" / "scratch" / "test.db"

    # セッションの作成と管理
    db.create_session(
        session_id="sess_abc123",
        source="cli",
        model="anthropic/claude-sonnet-4.6",
        user_id="user_1",
        parent_session_id=None,  # or previous session ID for lineage
    )
    db.end_session("sess_abc123", end_reason="user_exit")
    db.reopen_session("sess_abc123")

    # メッセージの保存
    msg_id = db.append_message(
        session_id="sess_abc123",
        role="assistant",
        content="Here's the answer...",
        tool_calls=[{"id": "call_1", "function": {"name": "terminal", "arguments": "{}"}}],
        token_count=150,
        finish_reason="stop",
        reasoning="Let me think about this...",
    )
    assert isinstance(msg_id, int)

    # メッセージの取り出し
    messages = db.get_messages("sess_abc123")
    conversation = db.get_messages_as_conversation("sess_abc123")
    assert messages[0]["tool_calls"][0]["id"] == "call_1"
    assert conversation[0]["role"] == "assistant"
    assert conversation[0]["reasoning"] == "Let me think about this..."

    # セッションのタイトル
    db.set_session_title("sess_abc123", "Fix Docker Build")
    session_id = db.resolve_session_by_title("Fix Docker Build")
    assert session_id == "sess_abc123"
    next_title = db.get_next_title_in_lineage("Fix Docker Build")
    assert next_title == "Fix Docker Build #2"

    # 全文検索
    db.append_message("sess_abc123", "user", "the docker deployment failed with an error")
    results = db.search_messages("docker deployment")
    assert [r["session_id"] for r in results] == ["sess_abc123"]
    results = db.search_messages("error", source_filter=["cli"])
    assert len(results) == 1
    results = db.search_messages("bug", exclude_sources=["telegram", "discord"])
    assert results == []
    results = db.search_messages("help", role_filter=["user"])
    assert results == []
    hit = db.search_messages("docker")[0]
    assert set(hit) >= {"id", "session_id", "role", "timestamp", "snippet", "context"}
    assert set(hit) >= {"source", "model", "session_started"}

    # 書き出しと後始末
    data = db.export_session("sess_abc123")
    assert data is not None and len(data["messages"]) == 2
    all_data = db.export_all(source="cli")
    assert isinstance(all_data, list) and isinstance(all_data[0]["messages"], list)
    deleted_count = db.prune_sessions(older_than_days=90)
    deleted_count = db.prune_sessions(older_than_days=30, source="telegram")
    assert deleted_count == 0
    db.clear_messages("sess_abc123")
    assert db.get_messages("sess_abc123") == []
    db.delete_session("sess_abc123")
    assert db.get_session("sess_abc123") is None
    db.close()


SEED_QUERIES = {
    "ancestors": """
WITH RECURSIVE lineage AS (
    SELECT * FROM sessions WHERE id = ?
    UNION ALL
    SELECT s.* FROM sessions s
    JOIN lineage l ON s.id = l.parent_session_id
)
SELECT id, title, started_at, parent_session_id FROM lineage;""",
    "descendants": """
WITH RECURSIVE descendants AS (
    SELECT * FROM sessions WHERE id = ?
    UNION ALL
    SELECT s.* FROM sessions s
    JOIN descendants d ON s.parent_session_id = d.id
)
SELECT id, title, started_at FROM descendants;""",
    "recent": """
SELECT s.*,
    COALESCE(
        (SELECT SUBSTR(m.content, 1, 63)
         FROM messages m
         WHERE m.session_id = s.id AND m.role = 'user' AND m.content IS NOT NULL
         ORDER BY m.timestamp, m.id LIMIT 1),
        ''
    ) AS preview,
    COALESCE(
        (SELECT MAX(m2.timestamp) FROM messages m2 WHERE m2.session_id = s.id),
        s.started_at
    ) AS last_active
FROM sessions s
ORDER BY s.started_at DESC
LIMIT 20;""",
    "by_model": """
SELECT model,
       COUNT(*) as session_count,
       SUM(input_tokens) as total_input,
       SUM(output_tokens) as total_output,
       SUM(estimated_cost_usd) as total_cost
FROM sessions
WHERE model IS NOT NULL
GROUP BY model
ORDER BY total_cost DESC;""",
    "top": """
SELECT id, title, model, input_tokens + output_tokens AS total_tokens,
       estimated_cost_usd
FROM sessions
ORDER BY total_tokens DESC
LIMIT 10;""",
}


def test_the_seed_documents_sql_queries_run_on_our_store(db: SessionDB) -> None:
    db.create_session("root", "cli", model="m")
    db.create_session("child", "cli", model="m", parent_session_id="root")
    db.append_message("root", "user", "first words of the root")
    db.update_token_counts("root", input_tokens=10, output_tokens=5, model="m")
    conn = sqlite3.connect(db.path)
    try:
        assert [r[0] for r in conn.execute(SEED_QUERIES["ancestors"], ("child",))] == [
            "child",
            "root",
        ]
        assert {r[0] for r in conn.execute(SEED_QUERIES["descendants"], ("root",))} == {
            "root",
            "child",
        }
        recent = conn.execute(SEED_QUERIES["recent"]).fetchall()
        assert len(recent) == 2
        assert conn.execute(SEED_QUERIES["by_model"]).fetchall()[0][:2] == ("m", 2)
        assert conn.execute(SEED_QUERIES["top"]).fetchone()[0] == "root"
    finally:
        conn.close()


# --- the agent's shapes ----------------------------------------------------------------------


def test_the_package_exports_the_real_class() -> None:
    assert ExportedSessionDB is SessionDB


def test_search_messages_takes_the_agents_positional_arguments(db: SessionDB) -> None:
    db.create_session("c", "cli")
    db.create_session("t", "telegram")
    db.append_message("c", "user", "quokka facts")
    db.append_message("t", "user", "quokka pictures")
    hits = db.search_messages("quokka", ["cli"], None, ["user"], 20, 0)
    assert [h["session_id"] for h in hits] == ["c"]


def test_return_shapes_follow_the_agent(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.set_session_title("s", "A title") is True
    assert db.end_session("s", "user_exit") is None
    assert db.clear_messages("s") is None
    assert db.delete_session("s") is True
    assert db.get_session_by_title("A title") is None


def test_ambiguous_prefix_resolves_to_none(db: SessionDB) -> None:
    db.create_session("abc1", "cli")
    db.create_session("abc2", "cli")
    assert db.resolve_session_id("abc") is None
    assert db.resolve_session_id("abc1") == "abc1"


def test_conversation_rows_are_marked_persisted(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hi")
    assert db.get_messages_as_conversation("s")[0]["_db_persisted"] is True
    with_ids = db.get_messages_as_conversation("s", include_row_ids=True)
    assert with_ids[0]["_row_id"] == db.get_messages("s")[0]["id"]


def test_get_session_carries_every_schema_31_column(db: SessionDB) -> None:
    db.create_session("s", "cli")
    row = db.get_session("s")
    assert row is not None
    assert {"system_prompt_hash", "hidden", "last_read_at", "tool_names", "created_source"} <= set(
        row
    )


def test_ensure_session_creates_once_and_never_overwrites(db: SessionDB) -> None:
    assert db.ensure_session("s") == "s"
    assert db.get_session("s")["source"] == "unknown"
    db.ensure_session("s", "cli", "m")
    row = db.get_session("s")
    assert (row["source"], row["model"]) == ("cli", "m")  # a placeholder source is replaced
    db.ensure_session("s", "telegram", "other")
    row = db.get_session("s")
    assert (row["source"], row["model"]) == ("cli", "m")


def test_update_system_prompt_is_read_back_by_get_session(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt="old")
    db.update_system_prompt("s", "You are Hermes.")
    assert db.get_session("s")["system_prompt"] == "You are Hermes."
    with pytest.raises(SessionNotFoundError):
        db.update_system_prompt("nope", "x")


def test_counts_match_the_listings_they_describe(db: SessionDB) -> None:
    for i in range(3):
        db.create_session(f"c{i}", "cli")
        db.append_message(f"c{i}", "user", "x")
    db.create_session("t", "telegram")
    db.create_session("sub", "subagent")
    db.create_session("cont", "cli", parent_session_id="c0")
    db.end_session("c0", "compression")
    listed = db.list_sessions_rich(limit=100)  # conversations, not their continuations
    assert db.session_count(exclude_children=True) == len(listed) == 5
    assert db.session_count() == 6  # the agent's default counts continuations too
    assert db.session_count(source="cli", exclude_children=True) == 3
    assert db.session_count(min_message_count=1) == 3
    assert db.session_count_by_source() == {"cli": 4, "subagent": 1, "telegram": 1}
    # The compressed conversation is shown as its live tip, naming its root.
    rich = {r["id"]: r for r in db.list_sessions_rich(limit=100)}
    assert rich["cont"]["_lineage_root_id"] == "c0" and "c0" not in rich
    assert "cont" in {r["id"] for r in db.list_sessions_rich(include_children=True)}
    assert [r["id"] for r in db.list_sessions_rich(id_query="C1")] == ["c1"]
    assert db.message_count() == 3 and db.message_count("c1") == 1


def test_search_sessions_orders_by_activity_and_scopes_a_workspace(db: SessionDB) -> None:
    now = time.time()
    db.create_session("old", "cli", git_repo_root="/src/app", started_at=now - 100)
    db.create_session("new", "cli", cwd="/src/app/lib", started_at=now - 50)
    db.create_session("other", "cli", cwd="/elsewhere", started_at=now)
    db.append_message("old", "user", "recent activity", timestamp=now + 10)
    assert [r["id"] for r in db.search_sessions()][:2] == ["old", "other"]
    assert [r["id"] for r in db.search_sessions(workspace_key="/src/app")] == ["old", "new"]


def test_token_counts_as_deltas_absolute_totals_and_a_queue(db: SessionDB) -> None:
    db.update_token_counts("s", input_tokens=10, output_tokens=5, model="m")  # creates "s"
    db.update_token_counts("s", input_tokens=10, output_tokens=5, model="m")
    row = db.get_session("s")
    assert (row["source"], row["input_tokens"], row["output_tokens"]) == ("unknown", 20, 10)
    db.update_token_counts("s", input_tokens=100, output_tokens=50, model="m", absolute=True)
    row = db.get_session("s")
    assert (row["input_tokens"], row["output_tokens"]) == (100, 50)
    db.queue_token_counts("s", input_tokens=1, model="m")
    assert db.get_session("s")["input_tokens"] == 100
    assert db.flush_token_counts() is True
    assert db.get_session("s")["input_tokens"] == 101
    db.record_auxiliary_usage("s", "title", model="small", input_tokens=7)
    tasks = db.store.conn.execute(
        "SELECT task, input_tokens FROM session_model_usage WHERE model = 'small'"
    ).fetchall()
    assert [tuple(r) for r in tasks] == [("title", 7)]
    # A side task's usage has its own row only: the session's totals are the main loop's.
    db.append_message("s", "user", "x")
    assert db.usage_totals() == {"tokens": 101 + 50, "cost_usd": 0.0}


def test_replace_messages_deletes_or_takes_back(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "user", "content": c} for c in ("a", "b", "c")])
    db.replace_messages(
        "s",
        [{"role": "user", "content": "a"}, {"role": "user", "content": "B"}],
        archive_dropped=True,
    )
    live = [m["content"] for m in db.get_messages("s")]
    every = [m["content"] for m in db.get_messages("s", include_inactive=True)]
    assert live == ["a", "B"] and every == ["a", "b", "c", "B"]
    db.replace_messages("s", [{"role": "user", "content": "only"}])
    assert [m["content"] for m in db.get_messages("s", include_inactive=True)] == ["only"]
    assert db.get_session("s")["message_count"] == 1


def test_append_messages_batch_returns_how_many(db: SessionDB) -> None:
    db.create_session("s", "cli")
    batch = [{"role": "user", "content": str(i)} for i in range(5)]
    assert db.append_messages_batch("s", batch, chunk_rows=2) == 5
    assert db.message_count("s") == 5


def test_compression_chain_and_tip(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.rotate_session("a", "b")
    db.rotate_session("b", "c")
    assert db.get_compression_chain("a") == ["a", "b", "c"]
    assert db.get_compression_tip("a") == "c"
    assert db.get_messages("c", include_ancestors=True) == db.get_messages(
        "c", include_ancestors=True
    )


def test_meta_and_vacuum(db: SessionDB) -> None:
    db.set_meta("plugin:key", "v")
    assert db.get_meta("plugin:key") == "v" and db.get_meta("missing") is None
    assert db.vacuum() >= 2  # the word and substring indexes at least


def test_prune_keeps_its_rich_result_under_its_own_name(db: SessionDB) -> None:
    result = db.prune(90, dry_run=True)
    assert isinstance(result, prune.PruneResult) and result.dry_run


def test_import_sessions_takes_records_and_answers_a_dict(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "to be copied")
    record = db.export_session("s")
    db.delete_session("s")
    summary = db.import_sessions([record])
    assert (summary["imported"], summary["messages"], summary["errors"]) == (1, 1, [])
    assert db.get_messages("s")[0]["content"] == "to be copied"


# --- bad input ---------------------------------------------------------------------------------


def test_a_misspelt_keyword_is_a_type_error(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.list_sessions(limt=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        db.create_session("s", "cli", modle="m")  # type: ignore[call-arg]


def test_unknown_sessions_answer_as_the_agent_does_and_a_taken_title_raises(
    db: SessionDB,
) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    db.set_session_title("a", "T")
    with pytest.raises(TitleInUseError):
        db.set_session_title("b", "T")
    with pytest.raises(SessionNotFoundError):
        db.append_message("nope", "user", "x")
    # The agent's own class answers False/None for an unknown id where nothing is written.
    assert db.delete_session("nope") is False
    assert db.set_session_title("nope", "x") is False
    assert db.get_session_title("nope") is None


def test_a_misspelt_keyword_is_a_type_checker_error_too(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists():
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    snippet = tmp_path / "caller.py"
    snippet.write_text(
        "from hermes_state import SessionDB\n"
        "db = SessionDB()\n"
        "db.list_sessions(limt=5)\n"
        "db.search_messages('q', ['cli'], None, ['user'], 20, 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'keyword argument "limt"' in errors[0], done.stdout


# --- façade pass-throughs not exercised elsewhere ---------------------------------------------


def test_facade_compression_chain_reads_follow_a_rotation(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.append_message("parent", "user", "before the rotation")
    db.rotate_session("parent", "child", kept_messages=[{"role": "user", "content": "kept"}])
    assert db.compression_successor("parent") == "child"
    assert db.compression_successor("child") is None
    assert db.compression_ancestors("child") == ["parent"]
    assert db.compression_tip("parent") == "child" == db.get_compression_tip("parent")


def test_facade_finds_an_owned_input_by_its_marker(db: SessionDB) -> None:
    from hermes_state.records.ownership import fresh_marker, with_marker

    db.create_session("s", "cli")
    marker = fresh_marker()
    row = db.append_message("s", "user", "hi", display_metadata=with_marker(None, marker))
    found = db.find_owned_input("s", marker)
    assert found is not None and found.message_id == row
    assert db.find_owned_input("s", fresh_marker()) is None


def test_facade_admission_lifecycle_start_and_finish(db: SessionDB) -> None:
    db.create_session("s", "gateway")
    epoch = db.begin_owner_epoch("gateway-1")
    queued = db.admit("s", "req-1", {"text": "hi"})
    assert queued.status == "queued"
    started = db.start_admission(queued.admission_id, epoch)
    assert started.status == "started" and started.owner_epoch == epoch
    done = db.finish_admission(queued.admission_id, "completed")
    assert done.status == "terminal" and done.outcome == "completed"


def test_facade_iter_export_all_streams_what_export_all_returns(db: SessionDB) -> None:
    for sid in ("a", "b"):
        db.create_session(sid, "cli" if sid == "a" else "cron")
        db.append_message(sid, "user", f"hello {sid}")
    streamed = list(db.iter_export_all())
    assert [r["id"] for r in streamed] == [r["id"] for r in db.export_all()]
    assert [r["id"] for r in db.iter_export_all(source="cron")] == ["b"]


def test_facade_optimize_returns_its_result(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hello")
    result = db.optimize()
    assert result.vacuumed and result.fts_optimized and not result.vacuum_skipped
