"""Recover: copy-first salvage of a (possibly damaged) store into a new verified store."""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import damage, stores
from test_recover_hang import hard_time_limit  # noqa: F401 (autouse: no test runs unbounded)

from hermes_state.recover.recover import PLACEHOLDER_TITLE, RecoveryError, recover
from hermes_state.store import schema
from hermes_state.store.connection import open_store
from hermes_state.store.errors import StoreNotFoundError

REPO = Path(__file__).resolve().parents[1]


def rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Run a query on a healthy store file read-only and return its rows."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def raw_sql(db: Path, *statements: str) -> None:
    """Run statements on a store with plain sqlite3 and foreign keys off (test set-up)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A healthy store with 4 sessions x 50 messages and usage rows."""
    db = tmp_path / "src" / "state.db"
    db.parent.mkdir()
    stores.populate_store(db, sessions_n=4, messages_per_session=50, content_size=200)
    return db


@pytest.fixture
def big_source(tmp_path: Path) -> Path:
    """A store whose messages span many leaf pages (for damage in the middle)."""
    db = tmp_path / "src" / "state.db"
    db.parent.mkdir()
    stores.populate_store(db, sessions_n=10, messages_per_session=200, content_size=300)
    return db


# --- healthy sources ------------------------------------------------------------------------


def test_recover_copies_a_healthy_store_completely(source: Path, tmp_path: Path) -> None:
    raw_sql(
        source,
        "INSERT INTO gateway_routing VALUES ('', 'k1', '{}', 1.0)",
        "INSERT INTO compression_locks VALUES ('sess-1-00000', 'pid 1', 1.0, 2.0)",
        "INSERT INTO async_delegations(delegation_id, origin_session, state, dispatched_at, "
        "updated_at) VALUES ('d1', 'sess-1-00000', 'running', 1.0, 1.0)",
        "INSERT INTO state_meta VALUES ('last_auto_archive', '123')",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.complete and report.verified and report.accepted and not report.installed
    for table in ("sessions", "messages", "session_model_usage", "gateway_routing"):
        assert rows(target, f"SELECT count(*) FROM {table}") == rows(
            source, f"SELECT count(*) FROM {table}"
        )
        assert report.tables[table].copied == report.tables[table].source_rows
    assert rows(target, "SELECT value FROM state_meta WHERE key = 'last_auto_archive'") == [
        ("123",)
    ]
    assert rows(target, "SELECT * FROM messages ORDER BY id") == rows(
        source, "SELECT * FROM messages ORDER BY id"
    )


def test_recover_rebuilds_fts_instead_of_copying_its_markers(source: Path, tmp_path: Path) -> None:
    # An agent that detached its indexes set fts_stale and dropped their triggers.
    raw_sql(source, "INSERT OR REPLACE INTO state_meta VALUES ('fts_stale', '1')")
    raw_sql(source, "DROP TRIGGER messages_fts_insert")
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert rows(target, "SELECT count(*) FROM state_meta WHERE key = 'fts_stale'") == [(0,)]
    assert report.verification.fts_checked and report.verification.fts_problems == []
    hits = rows(target, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'docker'")
    assert hits[0][0] > 0
    assert rows(target, "SELECT version FROM schema_version") == [(schema.SCHEMA_VERSION,)]
    assert rows(target, "SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_insert'")[
        0
    ] == (1,)


def test_recover_leaves_the_source_bundle_byte_identical(source: Path, tmp_path: Path) -> None:
    stores.crash_with_committed_wal(source, "sess-1-00000", count=20)
    before = stores.bundle_digest(source)
    assert f"{source.name}-wal" in before
    recover(source, tmp_path / "out.db")
    assert stores.bundle_digest(source) == before


def test_recover_reads_committed_wal_frames_of_a_stale_main_file(
    source: Path, tmp_path: Path
) -> None:
    stores.crash_with_committed_wal(source, "sess-1-00000", count=20)
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.complete
    got = rows(target, "SELECT count(*) FROM messages WHERE content LIKE 'after the last%'")
    assert got == [(20,)]


def test_recover_excludes_the_runtime_ledger(source: Path, tmp_path: Path) -> None:
    raw_sql(
        source,
        "INSERT INTO runtime_epoch(singleton, epoch) VALUES (1, 3)",
        "INSERT INTO session_admissions(admission_id, session_id, request_id, payload_json, "
        "payload_digest, created_at, updated_at) "
        "VALUES ('a', 'sess-1-00000', 'r', '{}', 'd', 1, 1)",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.excluded == {
        "runtime_epoch": 1,
        "session_admissions": 1,
        "worker_executions": 0,
        "worker_receipts": 0,
    }
    for table in schema.LEDGER_TABLES:
        assert rows(target, f"SELECT count(*) FROM {table}") == [(0,)]


def test_recover_copies_delivery_obligations_when_the_source_has_them(
    source: Path, tmp_path: Path
) -> None:
    store = open_store(source)
    try:
        store.write(schema.ensure_delivery_obligations)
    finally:
        store.close()
    raw_sql(
        source,
        "INSERT INTO delivery_obligations(obligation_id, session_key, platform, chat_id, content, "
        "state, created_at, updated_at) VALUES ('o1', 'k', 'telegram', 'c', 'hi', 'owed', 1, 1)",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.tables["delivery_obligations"].copied == 1
    assert report.complete
    assert rows(target, "SELECT obligation_id FROM delivery_obligations") == [("o1",)]


def test_recover_without_delivery_obligations_does_not_create_them(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert "delivery_obligations" not in report.tables
    assert rows(target, "SELECT count(*) FROM sqlite_master WHERE name='delivery_obligations'") == [
        (0,)
    ]


def test_recover_clears_a_dangling_parent_session(source: Path, tmp_path: Path) -> None:
    raw_sql(source, "UPDATE sessions SET parent_session_id = 'gone' WHERE id = 'sess-1-00001'")
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.parents_cleared == 1 and report.verification.foreign_key_violations == 0
    assert rows(target, "SELECT parent_session_id FROM sessions WHERE id = 'sess-1-00001'") == [
        (None,)
    ]


def test_recover_reports_progress_per_table(source: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, int, int | None]] = []
    recover(source, tmp_path / "out.db", progress=lambda t, d, n: seen.append((t, d, n)))
    last = [s for s in seen if s[0] == "messages"][-1]
    assert last == ("messages", 200, 200)


def test_recover_writes_a_json_report_next_to_the_target(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.db"
    report = recover(source, target)
    data = json.loads(Path(str(target) + ".recovery.json").read_text())
    assert data["installed"] is False and data["complete"] is True
    assert data["tables"]["messages"]["copied"] == 200
    assert sorted(data["excluded"]) == sorted(schema.LEDGER_TABLES)
    assert data == json.loads(json.dumps(report.to_dict()))


# --- refusals -------------------------------------------------------------------------------


def test_recover_refuses_an_existing_target(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.db"
    target.write_bytes(b"")
    with pytest.raises(RecoveryError, match="already exists"):
        recover(source, target)


def test_recover_refuses_a_target_whose_sidecar_exists(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.db"
    Path(str(target) + "-wal").write_bytes(b"")
    with pytest.raises(RecoveryError, match="already exists"):
        recover(source, target)
    assert not target.exists()


def test_recover_refuses_the_source_as_target(source: Path) -> None:
    with pytest.raises(RecoveryError, match="is the source"):
        recover(source, source)


def test_recover_refuses_to_overwrite_an_existing_report(source: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}")
    with pytest.raises(RecoveryError, match="report"):
        recover(source, tmp_path / "out.db", report_path=report)
    assert report.read_text() == "{}" and not (tmp_path / "out.db").exists()


def test_recover_of_a_missing_source_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        recover(tmp_path / "nothing.db", tmp_path / "out.db")


WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
# Every commit grows the WAL (no restart, no fsync), so any commit during the copy shows.
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("PRAGMA synchronous=OFF")
deadline = time.monotonic() + 5
n = 0
while time.monotonic() < deadline:
    conn.execute("INSERT INTO state_meta VALUES (hex(randomblob(8)), 'x')")
    n += 1
    if n == 100:
        print("ready", flush=True)  # writing for real by now
"""


def test_recover_of_a_source_being_written_reads_a_consistent_snapshot(
    big_source: Path, tmp_path: Path
) -> None:
    total = stores.count_rows(big_source, "messages")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(big_source)], stdout=subprocess.PIPE, text=True
    )
    reports = []
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        # The copy takes milliseconds; on a busy machine the writer may not run inside that
        # window every time: a few attempts, until one had to take the snapshot.
        for attempt in range(5):
            report = recover(big_source, tmp_path / f"out{attempt}.db")
            reports.append(report)
            if report.source_copy == "snapshot":
                break
    finally:
        writer.kill()
        writer.wait()
    snap = reports[-1]
    assert snap.source_copy == "snapshot", [r.source_copy for r in reports]
    assert snap.complete and snap.verified, snap.summary()
    assert any("snapshot" in n for n in snap.notes)
    assert rows(Path(snap.target), "SELECT count(*) FROM messages") == [(total,)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("hermes-recover-")]


def test_recover_that_cannot_take_a_snapshot_of_a_changing_source_refuses(
    big_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_state.recover import recover_source

    def changing(source: Path, work: Path, report: object) -> Path:
        raise recover_source.SourceChanging("state.db changed while it was being copied")

    def unreadable(path: Path, dest: Path, **_: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(recover_source, "copy_bundle", changing)
    monkeypatch.setattr(recover_source, "sqlite_snapshot", unreadable)
    with pytest.raises(RecoveryError, match="kept changing") as caught:
        recover(big_source, tmp_path / "out.db")
    assert "Stop the gateway" in (caught.value.hint or "")
    assert not (tmp_path / "out.db").exists()


# --- damaged sources ------------------------------------------------------------------------


def test_recover_salvages_the_rows_around_zeroed_pages(big_source: Path, tmp_path: Path) -> None:
    total = stores.count_rows(big_source, "messages")
    damage.zero_middle_pages(big_source, "messages", count=2, gap=3)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    copied = report.tables["messages"].copied
    lost = sum(r.last_rowid - r.first_rowid + 1 for r in report.skipped_ranges)
    assert report.partial and report.verified and report.skipped_ranges
    assert copied + lost == total and 0 < lost < 60
    assert rows(target, "SELECT count(*) FROM messages") == [(copied,)]


def test_recover_keeps_a_partial_target_but_accepts_it_only_with_allow_partial(
    big_source: Path, tmp_path: Path
) -> None:
    damage.zero_middle_pages(big_source, "messages", count=1)
    strict = recover(big_source, tmp_path / "strict.db")
    lenient = recover(big_source, tmp_path / "lenient.db", allow_partial=True)
    assert (tmp_path / "strict.db").exists() and not strict.accepted and not strict.complete
    assert lenient.accepted and lenient.verified and lenient.partial


def test_recover_gives_orphaned_messages_a_placeholder_session(
    source: Path, tmp_path: Path
) -> None:
    first = rows(source, "SELECT min(timestamp) FROM messages WHERE session_id = 'sess-1-00000'")
    damage.zero_middle_pages(source, "sessions", count=1)  # the only sessions page
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.placeholder_sessions == 4 and report.verification.foreign_key_violations == 0
    placeholder = rows(
        target,
        "SELECT source, started_at, message_count, title FROM sessions WHERE id = 'sess-1-00000'",
    )
    assert placeholder[0][:3] == ("recovered", first[0][0], 50)
    assert placeholder[0][3] in {PLACEHOLDER_TITLE.format(n=n) for n in range(1, 5)}
    assert rows(target, "SELECT count(*) FROM messages") == [(200,)]


def test_recover_salvages_a_truncated_store(big_source: Path, tmp_path: Path) -> None:
    damage.truncate_store(big_source, 0.6)
    report = recover(big_source, tmp_path / "out.db")
    assert report.partial and report.verified
    assert report.tables["messages"].copied > 0


def test_recover_reads_a_store_whose_header_is_garbage(source: Path, tmp_path: Path) -> None:
    damage.garbage_header(source)
    before = stores.bundle_digest(source)
    report = recover(source, tmp_path / "out.db")
    assert report.header_rewritten and report.verified
    assert report.tables["messages"].copied == 200 and report.tables["sessions"].copied == 4
    assert stores.bundle_digest(source) == before


def test_recover_of_a_file_that_is_no_database_reports_it_unreadable(tmp_path: Path) -> None:
    source = tmp_path / "state.db"
    source.write_bytes(os.urandom(3 * 4096))
    report = recover(source, tmp_path / "out.db")
    assert not report.source_readable and report.partial and not report.accepted
    assert report.verified and any("cannot be read" in note for note in report.notes)


def test_recover_reads_rows_below_a_damaged_interior_page(big_source: Path, tmp_path: Path) -> None:
    total = stores.count_rows(big_source, "messages")
    damage.zero_interior_page(big_source, "messages")
    report = recover(big_source, tmp_path / "out.db")
    messages = report.tables["messages"]
    assert messages.from_orphan_pages > 0 and messages.copied == total
    assert report.complete and not report.skipped_ranges


def test_recover_never_brings_back_rows_deleted_before_the_damage(
    big_source: Path, tmp_path: Path
) -> None:
    conn = sqlite3.connect(big_source, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=OFF")  # freed pages keep their old rows
        conn.execute("DELETE FROM messages WHERE id BETWEEN 500 AND 1500")
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
    finally:
        conn.close()
    damage.zero_interior_page(big_source, "messages")
    target = tmp_path / "out.db"
    recover(big_source, target)
    assert rows(target, "SELECT count(*) FROM messages WHERE id BETWEEN 500 AND 1500") == [(0,)]
    assert rows(target, "SELECT count(*) FROM messages") == [(2000 - 1001,)]


def sqlite3_cli() -> str | None:
    """Return an sqlite3 shell whose .recover works here (it needs sqlite_dbpage), or None."""
    for cli in (
        os.environ.get("HERMES_TEST_SQLITE3"),
        str(Path.home() / ".cache/hermes-sqlite/sqlite3-3.52.0/sqlite3"),  # .ci/build-sqlite-shell
        shutil.which("sqlite3"),
    ):
        if not cli or not Path(cli).exists():
            continue
        probe = subprocess.run([cli, ":memory:", ".recover"], capture_output=True, text=True)
        if probe.returncode == 0 and "error" not in probe.stderr.lower():
            return cli
    return None


@pytest.mark.parametrize(
    "harm",
    [
        lambda db: damage.zero_middle_pages(db, "messages", count=3, gap=2),
        lambda db: damage.zero_interior_page(db, "messages"),
        lambda db: damage.truncate_store(db, 0.6),
    ],
    ids=["zeroed-leaves", "zeroed-interior", "truncated"],
)
def test_recover_salvages_at_least_as_many_messages_as_sqlite_dot_recover(
    big_source: Path, tmp_path: Path, harm: Callable[[Path], object]
) -> None:
    cli = sqlite3_cli()
    if cli is None:
        pytest.skip("no sqlite3 shell with a working .recover (needs SQLITE_ENABLE_DBPAGE_VTAB)")
    harm(big_source)
    theirs_copy = tmp_path / "theirs-input.db"
    shutil.copyfile(big_source, theirs_copy)
    theirs = tmp_path / "theirs.db"
    dump = subprocess.run([cli, str(theirs_copy), ".recover"], capture_output=True, check=False)
    subprocess.run([cli, str(theirs)], input=dump.stdout, capture_output=True, check=False)
    their_count = rows(theirs, "SELECT count(*) FROM messages")[0][0]
    report = recover(big_source, tmp_path / "ours.db")
    assert report.tables["messages"].copied >= their_count


def test_recover_interrupted_midway_removes_its_half_made_target(
    source: Path, tmp_path: Path
) -> None:
    def stop(table: str, done: int, total: int | None) -> None:
        raise KeyboardInterrupt  # what Ctrl-C in the CLI's progress bar amounts to

    target = tmp_path / "out.db"
    with pytest.raises(KeyboardInterrupt):
        recover(source, target, progress=stop)
    assert not target.exists() and not Path(str(target) + ".recovery.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("hermes-recover-")]


# --- the target in the source's own layout (SPEC §19.7) ------------------------------------------


def test_recover_keeps_the_sources_schema_unknown_tables_and_columns(
    source: Path, tmp_path: Path
) -> None:
    raw_sql(
        source,
        "CREATE TABLE plugin_notes (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID",
        "INSERT INTO plugin_notes VALUES ('a', 'one'), ('b', 'two')",
        "ALTER TABLE sessions ADD COLUMN plugin_flag TEXT",
        "UPDATE sessions SET plugin_flag = 'x'",
        "PRAGMA application_id = 4242",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.layout == "source" and report.complete, report.to_dict()
    assert rows(target, "SELECT k, v FROM plugin_notes ORDER BY k") == [("a", "one"), ("b", "two")]
    assert rows(target, "SELECT DISTINCT plugin_flag FROM sessions") == [("x",)]
    assert rows(target, "PRAGMA application_id") == [(4242,)]
    same = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    assert rows(target, same) == rows(source, same)


def test_recover_of_a_schema_it_cannot_use_fails_loudly_naming_what_was_lost(
    source: Path, tmp_path: Path
) -> None:
    # No schema_version: the target falls back to a new store, which has no room for plugins.
    raw_sql(
        source,
        "DROP TABLE schema_version",
        "CREATE TABLE plugin_notes (id INTEGER PRIMARY KEY, v TEXT)",
        "INSERT INTO plugin_notes (v) VALUES ('kept only with --allow-partial')",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.layout == "fallback"
    assert report.not_copied == {"plugin_notes": 1}
    assert report.partial and not report.accepted
    again = recover(source, tmp_path / "again.db", allow_partial=True)
    assert again.accepted


def test_recover_cli_names_the_lost_table_and_exits_1(source: Path, tmp_path: Path) -> None:
    from clitools import run

    raw_sql(
        source,
        "DROP TABLE schema_version",
        "CREATE TABLE plugin_notes (id INTEGER PRIMARY KEY, v TEXT)",
        "INSERT INTO plugin_notes (v) VALUES ('x')",
    )
    result = run("sessions", "recover", "--from", str(source), "--to", str(tmp_path / "o.db"))
    assert result.exit_code == 1
    assert "Lost: table plugin_notes (1 rows)" in result.stderr


# --- round 2: completeness checked, header repaired, schema-less salvage, honest exit ------------

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # bench/ is scripts in the checkout, not a package

from bench import recover_matrix as matrix  # noqa: E402
from hermes_state.recover import lost_and_found  # noqa: E402


def _apply(step: Callable[..., None], db: Path, tmp_path: Path) -> None:
    """Run one of the damage matrix's steps on a store."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    step(db, random.Random(3), scratch)


@pytest.mark.parametrize(
    "mask", [0x40, 0x04], ids=["past-the-end: the cursor stops", "onto-another-row"]
)
def test_recover_continues_past_an_out_of_order_rowid(
    big_source: Path, tmp_path: Path, mask: int
) -> None:
    total = stores.count_rows(big_source, "messages")
    stores.settle(big_source)
    _apply(functools.partial(matrix.flip_rowid, mask=mask), big_source, tmp_path)
    report = recover(big_source, tmp_path / "out.db")
    messages = report.tables["messages"]
    # Only the row whose rowid was damaged is missing from its table; it is kept aside.
    assert messages.on_pages == total and messages.copied == total - 1
    assert messages.to_lost_and_found == 1
    assert report.lost_and_found == {lost_and_found.BAD_ROWID: 1}
    if mask == 0x40:
        assert messages.from_pages > 600  # what SQLite's cursor never returned
    assert not report.accepted and report.summary().startswith("PARTIAL: lost 1 of")


@pytest.mark.parametrize(
    ("offset", "value", "fix"),
    [
        (16, (1024).to_bytes(2, "big"), "page size"),
        (20, bytes([32]), "reserved bytes"),
        (21, bytes([1, 2, 3]), "payload fractions"),
        (28, (10**6).to_bytes(4, "big"), "database size"),
        (56, (9).to_bytes(4, "big"), "text encoding"),
        (0, b"SQLite format 2\x00", "magic"),
    ],
    ids=["page-size", "reserved", "fractions", "size", "encoding", "magic"],
)
def test_recover_repairs_each_header_field_from_the_real_pages(
    source: Path, tmp_path: Path, offset: int, value: bytes, fix: str
) -> None:
    stores.settle(source)
    fd = os.open(source, os.O_WRONLY)
    try:
        os.pwrite(fd, value, offset)
    finally:
        os.close(fd)
    report = recover(source, tmp_path / "out.db")
    assert any(f.startswith(fix) for f in report.header_fixes), report.header_fixes
    assert report.tables["messages"].copied == 200 and report.tables["sessions"].copied == 4
    assert report.complete, report.summary()


def test_recover_reads_every_table_from_its_pages_when_page_1_is_zeroed(
    big_source: Path, tmp_path: Path
) -> None:
    want = rows(big_source, "SELECT * FROM messages ORDER BY id")
    sessions = rows(big_source, "SELECT * FROM sessions ORDER BY id")
    stores.settle(big_source)
    _apply(matrix.page1_zeroed, big_source, tmp_path)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert report.schema_from_pages and report.layout == "source"
    assert rows(target, "SELECT * FROM messages ORDER BY id") == want
    assert rows(target, "SELECT * FROM sessions ORDER BY id") == sessions
    assert report.verified and report.complete, report.summary()


def test_recover_sorts_rows_into_tables_by_shape_when_their_schema_rows_are_lost(
    big_source: Path, tmp_path: Path
) -> None:
    want = rows(big_source, "SELECT id, session_id, content FROM messages ORDER BY id")
    _apply(matrix.schema_leaf_zeroed, big_source, tmp_path)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert report.layout == "fallback" and report.verified
    assert rows(target, "SELECT id, session_id, content FROM messages ORDER BY id") == want
    # The schema was lost: complete cannot be shown, and the first line says why.
    assert not report.accepted and "schema is damaged" in report.summary()


def test_recover_keeps_deleted_rows_out_of_live_tables_when_the_freelist_header_is_lost(
    big_source: Path, tmp_path: Path
) -> None:
    _apply(matrix.delete_a_session, big_source, tmp_path)
    want = rows(big_source, "SELECT count(*) FROM messages")[0][0]
    stores.settle(big_source)
    _apply(matrix.lose_freelist, big_source, tmp_path)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert rows(target, "SELECT count(*) FROM messages") == [(want,)]
    assert report.placeholder_sessions == 0 and report.complete
    # The free pages are known by the shape of their trunk: the deleted rows are counted, not
    # put back, and not even kept aside.
    assert report.deleted_rows_seen > 0 and not report.lost_and_found
    assert "deleted rows on free pages left deleted" in report.summary()


def test_recover_moves_rows_the_tool_cannot_use_to_lost_and_found(
    source: Path, tmp_path: Path
) -> None:
    raw_sql(
        source,
        "UPDATE messages SET timestamp = 'last tuesday' WHERE id = 5",
        "INSERT INTO sessions (id, source, started_at) VALUES (NULL, 'foreign', 1.7e9)",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert rows(target, "SELECT count(*) FROM messages WHERE id = 5") == [(0,)]
    assert rows(target, "SELECT count(*) FROM sessions WHERE id IS NULL") == [(0,)]
    aside = rows(target, "SELECT table_name, reason FROM lost_and_found ORDER BY table_name")
    assert [(t, r.split(":")[0]) for t, r in aside] == [
        ("messages", lost_and_found.INVALID),
        ("sessions", lost_and_found.INVALID),
    ]
    assert report.verification.foreign_key_violations == 0 and not report.accepted


def test_recover_ignores_a_wal_that_belongs_to_another_store(
    big_source: Path, tmp_path: Path
) -> None:
    want = rows(big_source, "SELECT * FROM messages ORDER BY id")
    stores.settle(big_source)
    _apply(matrix.foreign_wal, big_source, tmp_path)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert report.wal.startswith("ignored"), report.wal
    assert rows(target, "SELECT * FROM messages ORDER BY id") == want


def test_recover_ignores_a_stale_wal_of_the_same_store(big_source: Path, tmp_path: Path) -> None:
    _apply(matrix.stale_wal_prepare, big_source, tmp_path)
    want = rows(big_source, "SELECT * FROM messages ORDER BY id")
    _apply(matrix.stale_wal_damage, big_source, tmp_path)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert report.wal.startswith("ignored: stale"), report.wal
    assert rows(target, "SELECT * FROM messages ORDER BY id") == want


def test_recover_replays_a_wal_that_fits(source: Path, tmp_path: Path) -> None:
    stores.crash_with_committed_wal(source, "sess-1-00000", count=20)
    report = recover(source, tmp_path / "out.db")
    assert report.wal.startswith("replayed") and report.complete


def test_recover_of_a_healthy_store_copies_it_whole_without_the_ledger_in_free_pages(
    source: Path, tmp_path: Path
) -> None:
    raw_sql(
        source,
        "INSERT INTO session_admissions(admission_id, session_id, request_id, payload_json, "
        "payload_digest, created_at, updated_at) "
        "VALUES ('a', 'sess-1-00000', 'r', 'LEDGER-MARKER-1234', 'd', 1, 1)",
    )
    target = tmp_path / "out.db"
    report = recover(source, target)
    assert report.method == "copy" and report.search_indexes == "copied" and report.complete
    assert report.verification.fts_checked and report.verification.fts_problems == []
    assert b"LEDGER-MARKER-1234" not in target.read_bytes()


def test_recover_cli_first_line_says_how_much_was_lost_with_allow_partial(
    big_source: Path, tmp_path: Path
) -> None:
    from clitools import run

    damage.zero_middle_pages(big_source, "messages", count=1)
    result = run(
        "sessions",
        "recover",
        "--from",
        str(big_source),
        "--to",
        str(tmp_path / "o.db"),
        "--allow-partial",
    )
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first.startswith("PARTIAL: lost ") and " rows" in first and "recovered" in first


def test_recover_replays_the_wal_of_a_vacuum_that_shrank_the_file(
    big_source: Path, tmp_path: Path
) -> None:
    # A VACUUM in WAL mode leaves a smaller database in the WAL than the main file still is:
    # that WAL is the newest state, not a stale one.
    conn = sqlite3.connect(big_source, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("DELETE FROM messages WHERE id > 1000")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    script = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "c.execute('VACUUM')\n"
        "c.execute(\"UPDATE messages SET content = 'after the vacuum' WHERE id = 7\")\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(big_source)], check=True, timeout=60)
    target = tmp_path / "out.db"
    report = recover(big_source, target)
    assert report.wal.startswith("replayed"), report.wal
    assert rows(target, "SELECT content FROM messages WHERE id = 7") == [("after the vacuum",)]
