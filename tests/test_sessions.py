"""Session rows: upsert, end/reopen, lookup, titles, lineage, listing, statistics, bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.records import session_list, sessions
from hermes_state.store.errors import (
    AmbiguousSessionIdError,
    HermesStateError,
    InvalidTitleError,
    SessionNotFoundError,
    TitleInUseError,
)
from hermes_state.upkeep import deletion


def archive(db: SessionDB, session_id: str) -> None:
    """Mark a session archived."""
    db.set_session_archived(session_id, True)


def ids(rows: list[dict]) -> list[str]:
    """The ids of listed rows, in order."""
    return [r["id"] for r in rows]


# --- create / end / reopen -----------------------------------------------------------------------


def test_create_session_returns_the_id_and_stores_the_row(db: SessionDB) -> None:
    assert db.create_session("s1", "cli", model="m1", user_id="basic:alice") == "s1"
    row = db.get_session("s1")
    assert (row["source"], row["model"], row["user_id"]) == ("cli", "m1", "basic:alice")
    assert row["message_count"] == 0 and row["ended_at"] is None


def test_create_session_upsert_never_overwrites_what_an_earlier_writer_set(db: SessionDB) -> None:
    db.create_session("s1", "cli", model="m1", user_id="u1", started_at=100.0)
    db.create_session("s1", "telegram", model="m2", user_id="u2", started_at=200.0)
    row = db.get_session("s1")
    assert (row["source"], row["model"], row["user_id"], row["started_at"]) == (
        "cli",
        "m1",
        "u1",
        100.0,
    )


def test_create_session_upsert_fills_columns_left_null(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.create_session("s1", "cli", model="m2", cwd="/work", chat_id="42")
    row = db.get_session("s1")
    assert (row["model"], row["cwd"], row["chat_id"]) == ("m2", "/work", "42")


def test_create_session_replaces_the_placeholder_source_unknown(db: SessionDB) -> None:
    db.create_session("s1", "unknown")
    db.create_session("s1", "telegram")
    assert db.get_session("s1")["source"] == "telegram"


def test_create_session_with_a_missing_parent_raises_and_creates_nothing(db: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError) as caught:
        db.create_session("child", "cli", parent_session_id="nope")
    assert caught.value.hint
    assert db.get_session("child") is None


def test_child_session_inherits_cwd_and_git_fields_from_its_parent(db: SessionDB) -> None:
    db.create_session("p", "cli", cwd="/repo", git_branch="main", git_repo_root="/repo")
    db.create_session("c", "cli", parent_session_id="p")
    row = db.get_session("c")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/repo", "main", "/repo")


def test_child_session_keeps_its_own_cwd_over_the_parents(db: SessionDB) -> None:
    db.create_session("p", "cli", cwd="/repo", git_branch="main")
    db.create_session("c", "cli", parent_session_id="p", cwd="/other")
    row = db.get_session("c")
    assert (row["cwd"], row["git_branch"]) == ("/other", "main")


def test_end_session_first_end_wins(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert sessions.end_session(db.store, "s1", "user_exit") is True
    ended_at = db.get_session("s1")["ended_at"]
    assert sessions.end_session(db.store, "s1", "idle") is False
    row = db.get_session("s1")
    assert (row["end_reason"], row["ended_at"]) == ("user_exit", ended_at)


def test_reopen_session_clears_the_end(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.end_session("s1", "user_exit")
    db.reopen_session("s1")
    row = db.get_session("s1")
    assert (row["ended_at"], row["end_reason"]) == (None, None)
    assert sessions.end_session(db.store, "s1", "idle") is True


def test_get_session_of_an_unknown_id_is_none(db: SessionDB) -> None:
    assert db.get_session("nope") is None


# --- lookup ----------------------------------------------------------------------------------


@pytest.fixture
def named(db: SessionDB) -> SessionDB:
    """A store with sessions abc, abcd, a_b1, axb2 and zed."""
    for sid in ("abc", "abcd", "a_b1", "axb2", "zed"):
        db.create_session(sid, "cli")
    return db


def test_resolve_session_id_prefers_an_exact_match(named: SessionDB) -> None:
    assert named.resolve_session_id("abc") == "abc"


def test_resolve_session_id_accepts_a_unique_prefix(named: SessionDB) -> None:
    assert named.resolve_session_id("ze") == "zed"


def test_resolve_session_id_treats_like_wildcards_literally(named: SessionDB) -> None:
    assert named.resolve_session_id("a_") == "a_b1"


def test_resolve_session_id_raises_on_an_ambiguous_prefix(named: SessionDB) -> None:
    assert named.resolve_session_id("ab") is None  # the agent's façade: no unique answer
    with pytest.raises(AmbiguousSessionIdError) as caught:
        sessions.resolve_session_id(named.store, "ab")
    assert "abc" in str(caught.value) and "abcd" in str(caught.value)
    assert caught.value.hint


def test_resolve_session_id_returns_none_without_a_match(named: SessionDB) -> None:
    assert named.resolve_session_id("q") is None


def test_find_session_resolves_a_title(named: SessionDB) -> None:
    named.set_session_title("axb2", "Release notes")
    assert named.find_session("Release notes") == "axb2"


def test_find_session_raises_when_nothing_matches(named: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError) as caught:
        named.find_session("no such thing")
    assert caught.value.hint


# --- titles ------------------------------------------------------------------------------------


def test_title_is_sanitised(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    stored = sessions.set_session_title(
        db.store, "s1", "  Fix\u200b the\t\tDocker\x07  build\ufeff \n"
    )
    assert stored == "Fix the Docker build"
    assert db.get_session_title("s1") == "Fix the Docker build"


def test_title_of_100_chars_is_accepted(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert db.set_session_title("s1", "x" * 100) is True
    assert db.get_session_title("s1") == "x" * 100


def test_title_over_100_chars_raises_and_keeps_the_old_title(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.set_session_title("s1", "Old")
    with pytest.raises(InvalidTitleError) as caught:
        db.set_session_title("s1", "x" * 101)
    assert caught.value.hint
    assert db.get_session_title("s1") == "Old"


def test_duplicate_title_raises_naming_the_holder(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    db.set_session_title("s1", "Shared")
    with pytest.raises(TitleInUseError) as caught:
        db.set_session_title("s2", "Shared")
    assert caught.value.holder == "s1" and "s1" in str(caught.value)
    assert caught.value.hint
    assert db.get_session_title("s2") is None


def test_setting_the_same_title_again_on_its_holder_is_fine(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.set_session_title("s1", "Mine")
    assert db.set_session_title("s1", "Mine") is True


@pytest.mark.parametrize("cleared", [None, "", " \u200b "])
def test_clearing_a_title_frees_it_for_another_session(db: SessionDB, cleared: str | None) -> None:
    db.create_session("s1", "cli")
    db.create_session("s2", "cli")
    db.set_session_title("s1", "Shared")
    assert db.set_session_title("s1", cleared) is True  # the session exists: it was cleared
    assert db.get_session_title("s1") is None
    assert db.set_session_title("s2", "Shared") is True


@pytest.fixture
def lineage_titles(db: SessionDB) -> SessionDB:
    """Sessions titled "T", "T #2", "T #3" (oldest to newest) and an unrelated "Tx"."""
    for n, (sid, title) in enumerate([("t1", "T"), ("t2", "T #2"), ("t3", "T #3"), ("tx", "Tx")]):
        db.create_session(sid, "cli", started_at=1000.0 + n)
        db.set_session_title(sid, title)
    return db


def test_resolve_session_by_title_returns_the_newest_of_the_lineage(
    lineage_titles: SessionDB,
) -> None:
    assert lineage_titles.resolve_session_by_title("T") == "t3"


def test_resolve_session_by_title_with_a_number_names_that_session(
    lineage_titles: SessionDB,
) -> None:
    assert lineage_titles.resolve_session_by_title("T #2") == "t2"


def test_resolve_session_by_title_escapes_like_wildcards(db: SessionDB) -> None:
    db.create_session("a", "cli", started_at=1.0)
    db.create_session("b", "cli", started_at=2.0)
    db.set_session_title("a", "50%_off")
    db.set_session_title("b", "50xyoff #2")
    assert db.resolve_session_by_title("50%_off") == "a"


def test_resolve_session_by_title_of_an_unknown_title_is_none(lineage_titles: SessionDB) -> None:
    assert lineage_titles.resolve_session_by_title("Nothing") is None


def test_next_title_in_lineage_after_the_original_is_number_2(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.set_session_title("s1", "Fix Docker Build")
    assert db.get_next_title_in_lineage("Fix Docker Build") == "Fix Docker Build #2"


def test_next_title_in_lineage_after_number_3_is_number_4(lineage_titles: SessionDB) -> None:
    assert lineage_titles.get_next_title_in_lineage("T") == "T #4"
    assert lineage_titles.get_next_title_in_lineage("T #2") == "T #4"


def test_next_title_of_an_unused_title_is_the_title_itself(db: SessionDB) -> None:
    assert db.get_next_title_in_lineage("Fresh") == "Fresh"


# --- lineage ---------------------------------------------------------------------------------


@pytest.fixture
def chain(db: SessionDB) -> SessionDB:
    """root -> mid -> leaf, plus a sibling of mid."""
    db.create_session("root", "cli", started_at=1.0)
    db.create_session("mid", "cli", parent_session_id="root", started_at=2.0)
    db.create_session("leaf", "cli", parent_session_id="mid", started_at=3.0)
    db.create_session("sib", "cli", parent_session_id="root", started_at=4.0)
    return db


def test_get_lineage_lists_ancestors_root_first(chain: SessionDB) -> None:
    assert ids(chain.get_lineage("leaf")) == ["root", "mid", "leaf"]


def test_get_lineage_of_an_unknown_session_raises(chain: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError):
        chain.get_lineage("nope")


def test_get_descendants_lists_every_descendant_nearest_first(chain: SessionDB) -> None:
    rows = chain.get_descendants("root")
    assert ids(rows) == ["mid", "sib", "leaf"]
    assert [r["depth"] for r in rows] == [1, 1, 2]


# --- listing ---------------------------------------------------------------------------------


def test_list_preview_is_the_first_user_message_flattened(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "assistant", "I speak first")
    db.append_message("s1", "user", "line one\nline two\r\n  three")
    db.append_message("s1", "user", "second user message")
    assert db.list_sessions()[0]["preview"] == "line one line two three"


def test_list_preview_cuts_at_60_chars_with_an_ellipsis(db: SessionDB) -> None:
    db.create_session("long", "cli", started_at=2.0)
    db.create_session("exact", "cli", started_at=1.0)
    db.append_message("long", "user", "a" * 59 + "bc" + "d" * 40)
    db.append_message("exact", "user", "e" * 60)
    previews = {r["id"]: r["preview"] for r in db.list_sessions()}
    assert previews == {"long": "a" * 59 + "b…", "exact": "e" * 60}


def test_list_preview_is_empty_without_a_user_message(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    assert db.list_sessions()[0]["preview"] == ""


def test_list_last_active_is_the_latest_message_time(db: SessionDB) -> None:
    db.create_session("s1", "cli", started_at=100.0)
    db.append_message("s1", "user", "a", timestamp=150.0)
    db.append_message("s1", "assistant", "b", timestamp=175.0)
    assert db.list_sessions()[0]["last_active"] == 175.0


def test_list_last_active_without_messages_is_started_at(db: SessionDB) -> None:
    db.create_session("s1", "cli", started_at=100.0)
    assert db.list_sessions()[0]["last_active"] == 100.0


@pytest.fixture
def mixed(db: SessionDB) -> SessionDB:
    """cli, telegram and discord sessions started at 1, 2, 3."""
    for n, (sid, source) in enumerate([("c", "cli"), ("t", "telegram"), ("d", "discord")]):
        db.create_session(sid, source, started_at=float(n + 1))
    return db


def test_list_sessions_filters_by_sources(mixed: SessionDB) -> None:
    assert ids(mixed.list_sessions(sources=["cli", "discord"])) == ["d", "c"]


def test_list_sessions_excludes_sources(mixed: SessionDB) -> None:
    assert ids(mixed.list_sessions(exclude_sources=["telegram"])) == ["d", "c"]


def test_list_sessions_hides_archived_unless_asked(mixed: SessionDB) -> None:
    archive(mixed, "t")
    assert ids(mixed.list_sessions()) == ["d", "c"]
    assert ids(mixed.list_sessions(include_archived=True)) == ["d", "t", "c"]


def test_list_sessions_orders_by_start_or_by_activity(mixed: SessionDB) -> None:
    mixed.append_message("c", "user", "recent", timestamp=50.0)
    assert ids(mixed.list_sessions(order="started")) == ["d", "t", "c"]
    assert ids(mixed.list_sessions(order="active")) == ["c", "d", "t"]


def test_list_sessions_pages_with_limit_and_offset(db: SessionDB) -> None:
    for n in range(5):
        db.create_session(f"s{n}", "cli", started_at=float(n))
    assert ids(db.list_sessions(limit=2, offset=0)) == ["s4", "s3"]
    assert ids(db.list_sessions(limit=2, offset=2)) == ["s2", "s1"]
    assert ids(db.list_sessions(limit=2, offset=4)) == ["s0"]


def test_list_and_count_sessions_filter_by_start_time(mixed: SessionDB) -> None:
    assert ids(mixed.list_sessions(started_after=2.0)) == ["d", "t"]
    assert ids(mixed.list_sessions(started_before=2.0)) == ["c"]
    assert ids(mixed.list_sessions(started_after=2.0, started_before=3.0)) == ["t"]

    assert session_list.count_sessions(mixed.store, started_after=2.0) == 2
    assert session_list.count_sessions(mixed.store, started_before=2.0, sources=["telegram"]) == 0


def test_recent_session_ids_come_newest_first_with_titles(mixed: SessionDB) -> None:

    mixed.set_session_title("t", "Travel")
    assert session_list.recent_session_ids(mixed.store) == [
        ("d", None),
        ("t", "Travel"),
        ("c", None),
    ]
    assert session_list.recent_session_ids(mixed.store, "t") == [("t", "Travel")]
    assert session_list.recent_session_ids(mixed.store, limit=1) == [("d", None)]


def test_titles_with_prefix_and_distinct_sources(mixed: SessionDB) -> None:

    mixed.set_session_title("c", "Fix Docker build")
    mixed.set_session_title("d", "Fix search")
    mixed.set_session_title("t", "Groceries")
    assert session_list.titles_with_prefix(mixed.store, "Fix") == ["Fix Docker build", "Fix search"]
    assert session_list.titles_with_prefix(mixed.store, "fix") == []
    assert session_list.distinct_sources(mixed.store) == ["cli", "discord", "telegram"]


# --- usage and statistics --------------------------------------------------------------------


@pytest.fixture
def usage(db: SessionDB) -> SessionDB:
    """Two sessions with recorded usage on two models, plus messages."""
    db.create_session("a", "cli", model="m-big")
    db.create_session("b", "telegram", model="m-small")
    db.record_usage("a", "m-big", input_tokens=1000, output_tokens=200, estimated_cost_usd=0.5)
    db.record_usage("a", "m-big", input_tokens=500, output_tokens=100, estimated_cost_usd=0.25)
    db.record_usage("b", "m-small", input_tokens=10, output_tokens=5, estimated_cost_usd=0.01)
    db.append_messages(
        "a", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]
    )
    db.append_message("b", "user", "hi")
    return db


def test_record_usage_adds_to_the_session_counters(usage: SessionDB) -> None:
    row = usage.get_session("a")
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (1500, 300, 2)
    assert row["estimated_cost_usd"] == pytest.approx(0.75)


def test_record_usage_aggregates_one_row_per_model_route(usage: SessionDB) -> None:
    rows = usage.store.conn.execute(
        "SELECT model, api_call_count, input_tokens, output_tokens, estimated_cost_usd"
        " FROM session_model_usage WHERE session_id = 'a'"
    ).fetchall()
    assert [tuple(r) for r in rows] == [("m-big", 2, 1500, 300, pytest.approx(0.75))]


def test_usage_by_model_sums_tokens_per_model(usage: SessionDB) -> None:
    rows = usage.usage_by_model()
    assert [
        (r["model"], r["session_count"], r["input_tokens"], r["output_tokens"]) for r in rows
    ] == [
        ("m-big", 1, 1500, 300),
        ("m-small", 1, 10, 5),
    ]


def test_usage_by_model_reports_the_estimated_cost_when_no_actual_cost_is_known(
    usage: SessionDB,
) -> None:
    costs = {r["model"]: r["cost_usd"] for r in usage.usage_by_model()}
    assert costs == {"m-big": pytest.approx(0.75), "m-small": pytest.approx(0.01)}


def test_top_sessions_by_tokens_orders_by_total(usage: SessionDB) -> None:
    rows = usage.top_sessions_by_tokens(2)
    assert [(r["id"], r["total_tokens"]) for r in rows] == [("a", 1800), ("b", 15)]


def test_top_sessions_by_tokens_reports_the_estimated_cost(usage: SessionDB) -> None:
    assert usage.top_sessions_by_tokens(1)[0]["cost_usd"] == pytest.approx(0.75)


def test_actual_cost_wins_over_the_estimate_once_recorded(db: SessionDB) -> None:
    db.create_session("a", "cli", model="m")
    db.record_usage("a", "m", input_tokens=1, estimated_cost_usd=0.5, actual_cost_usd=0.4)
    assert db.usage_by_model()[0]["cost_usd"] == pytest.approx(0.4)


def test_counts_by_source_counts_sessions_and_messages(usage: SessionDB) -> None:
    rows = [(r["source"], r["sessions"], r["messages"]) for r in usage.counts_by_source()]
    assert sorted(rows) == [("cli", 1, 2), ("telegram", 1, 1)]


def test_store_stats_reports_files_pages_and_row_counts(usage: SessionDB) -> None:
    stats = usage.store_stats()
    assert stats["schema_version"] == 31
    assert stats["journal_mode"] == usage.store.conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert (stats["tables"]["sessions"], stats["tables"]["messages"]) == (2, 3)
    assert stats["files"]["db"] > 0
    assert (stats["files"]["wal"] > 0) == (stats["journal_mode"] == "wal")
    assert stats["total_bytes"] == sum(stats["files"].values())
    assert stats["page_count"] * stats["page_size"] >= stats["files"]["db"]


def test_record_usage_for_an_unknown_session_raises(db: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError):
        db.record_usage("nope", "m", input_tokens=1)


# --- bad input never touches data --------------------------------------------------------------


@pytest.fixture
def closed_store(db_path: Path) -> Path:
    """A closed store with sessions s1 (titled "Taken") and s2."""
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli")
        db.create_session("s2", "cli")
        db.set_session_title("s1", "Taken")
        db.append_message("s1", "user", "hello")
    return db_path


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.end_session("nope", "x"), SessionNotFoundError),
        (lambda db: db.append_message("nope", "user", "x"), SessionNotFoundError),
        # The concern modules raise; SessionDB answers False there, as the agent's class does.
        (lambda db: sessions.set_session_title(db.store, "nope", "x"), SessionNotFoundError),
        (lambda db: deletion.delete_session(db.store, "nope"), SessionNotFoundError),
        (lambda db: db.find_session("nope"), SessionNotFoundError),
        (lambda db: db.set_session_title("s2", "y" * 101), InvalidTitleError),
        (lambda db: db.set_session_title("s2", "Taken"), TitleInUseError),
    ],
    ids=["end", "append", "title-unknown", "delete", "find", "title-long", "title-duplicate"],
)
def test_bad_input_raises_a_typed_error_with_a_hint_and_touches_no_data(
    closed_store: Path,
    sha256: Callable[[Path], str],
    call: Callable[[SessionDB], object],
    error: type[HermesStateError],
) -> None:
    digest = sha256(closed_store)
    with SessionDB(closed_store) as db:
        with pytest.raises(error) as caught:
            call(db)
        assert isinstance(caught.value, HermesStateError) and caught.value.hint
    assert sha256(closed_store) == digest


def test_unknown_create_column_is_refused_before_any_write(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.create_session("s1", "cli", no_such_column="x")
    assert db.get_session("s1") is None


def test_session_ids_are_stored_verbatim(db: SessionDB) -> None:
    odd = "id with 'quotes' and \"double\" and ; DROP TABLE sessions"
    db.create_session(odd, "cli")
    assert db.get_session(odd)["id"] == odd
    assert db.store.conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1


def test_end_session_and_record_usage_take_explicit_times(db) -> None:
    db.create_session("t1", "cli")
    db.end_session("t1", "user_exit", ended_at=1_700_000_000.5)
    assert db.get_session("t1")["ended_at"] == 1_700_000_000.5
    db.record_usage("t1", "m", input_tokens=5, at=1_700_000_100.0)
    row = db.store.conn.execute(
        "SELECT first_seen, last_seen FROM session_model_usage WHERE session_id = 't1'"
    ).fetchone()
    assert tuple(row) == (1_700_000_100.0, 1_700_000_100.0)


# --- pins, archive and the listing filters of `sessions browse` -------------------------------


def test_set_session_pinned_pins_and_unpins(mixed: SessionDB) -> None:
    assert mixed.set_session_pinned("t", True) is True
    assert mixed.get_session("t")["pinned"] == 1
    assert mixed.set_session_pinned("t", False) is True
    assert mixed.get_session("t")["pinned"] == 0


def test_set_session_pinned_again_is_harmless(mixed: SessionDB) -> None:
    mixed.set_session_pinned("t", True)
    assert mixed.set_session_pinned("t", True) is True
    assert mixed.get_session("t")["pinned"] == 1


def test_set_session_archived_hides_the_session_from_listings(mixed: SessionDB) -> None:
    assert mixed.set_session_archived("t", True) is True
    assert ids(mixed.list_sessions()) == ["d", "c"]
    assert mixed.set_session_archived("t", False) is True
    assert ids(mixed.list_sessions()) == ["d", "t", "c"]


@pytest.mark.parametrize("flag", ["pinned", "archived"])
def test_setting_a_flag_of_an_unknown_session_returns_false_and_writes_nothing(
    mixed: SessionDB, flag: str
) -> None:
    setter = getattr(mixed, f"set_session_{flag}")
    assert setter("ghost", True) is False
    assert mixed.get_session("ghost") is None
    assert all(not r[flag] for r in mixed.list_sessions(include_archived=True))


def test_list_sessions_archived_only_and_pinned_only(mixed: SessionDB) -> None:
    mixed.set_session_archived("t", True)
    mixed.set_session_pinned("c", True)
    assert ids(mixed.list_sessions(archived_only=True)) == ["t"]
    assert ids(mixed.list_sessions(pinned_only=True)) == ["c"]
    assert sessions_count(mixed, archived_only=True) == 1


def test_list_sessions_active_since_keeps_recently_active_sessions(mixed: SessionDB) -> None:
    mixed.append_message("c", "user", "late", timestamp=50.0)
    assert ids(mixed.list_sessions(active_since=10.0, order="active")) == ["c"]
    assert sessions_count(mixed, active_since=10.0) == 1


def test_get_sessions_by_id_returns_listing_columns_keyed_by_id(mixed: SessionDB) -> None:

    rows = session_list.get_sessions_by_id(mixed.store, ["t", "ghost", "c", "t"])
    assert sorted(rows) == ["c", "t"]
    assert rows["t"]["source"] == "telegram" and "pinned" in rows["t"]


def sessions_count(db: SessionDB, **filters: object) -> int:
    """count_sessions through the library (the façade has no count)."""
    from hermes_state.records import session_list

    return session_list.count_sessions(db.store, **filters)  # type: ignore[arg-type]
