"""SPEC §19 against the real Hermes Agent releases: whatever we do to a store a release wrote,
that release keeps working on it, nothing it wrote is lost, and we find what it writes next."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.children import child_env

from interop.harness import (
    LEDGER,
    REPO_ROOT,
    agent_problems,
    copy_store,
    dump,
    exercise,
    file_digests,
    hermes,
    lost_rows,
    our_search,
)
from interop.releases import BY_KEY, Release, run_probe

SAMPLE = REPO_ROOT / "examples" / "sample-sessions.jsonl"
_EMPTY = hashlib.sha256(b"").hexdigest()
OLD_SESSIONS = ("s_old_1", "s_old_2", "s_old_3")


def _ok(done: Any) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def _agent_still_works(
    release: Release, home: Path, baseline: dict[str, Any], tag: str, deleted: tuple[str, ...] = ()
) -> None:
    """The release uses the store as usual, and our search finds the rows it wrote."""
    steps = exercise(release, home, tag)
    problems = agent_problems(steps, baseline, tag, deleted_sessions=deleted)
    assert not problems, "\n".join(problems)
    assert f"r_{tag}" in our_search(home, "zebrafish")
    assert f"r_{tag}" in our_search(home, "予約")  # a 2-character CJK word the release wrote
    assert "s_tg_tokyo" in our_search(home, "narwhal")


# --- reading never changes a byte ----------------------------------------------------------------

READS = (
    ("sessions", "list"),
    ("sessions", "list", "--json"),
    ("sessions", "search", "kubernetes"),
    ("sessions", "search", "会議", "--json"),
    ("sessions", "show", "s_cli_docker"),
    ("sessions", "stats", "--json"),
    ("sessions", "export", "-o", "-"),
    ("db", "check"),
    ("db", "path"),
    ("db", "lockowners"),
)


def test_read_commands_change_no_byte_of_the_store(built: Path, release: Release) -> None:
    before = file_digests(built)
    for args in READS:
        _ok(hermes(built, *args))
    after = file_digests(built)
    assert after["state.db"] == before["state.db"]
    # A WAL reader may create empty sidecars (SQLite's shared-memory coordination), no more.
    assert after.get("state.db-wal", _EMPTY) in (before.get("state.db-wal"), _EMPTY)


def test_db_check_calls_an_untouched_store_a_healthy_upstream_layout(
    built: Path, release: Release
) -> None:
    done = hermes(built, "db", "check", "--json")
    _ok(done)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["layout"]["ok"] and "healthy upstream layout" in checks["layout"]["detail"]
    assert f"schema {release.schema}" in checks["layout"]["detail"]
    assert "SQLite" in checks["journal"]["detail"]


def test_our_counts_and_hits_agree_with_the_release(
    built: Path, release: Release, baseline: dict[str, Any]
) -> None:
    done = hermes(built, "sessions", "list", "--json", "--limit", "1000", "--archived")
    _ok(done)
    listed = json.loads(done.stdout)
    rows = listed["sessions"] if isinstance(listed, dict) else listed
    assert {r["id"] for r in rows} == {key[0] for key in dump(built / "state.db")["sessions"]}
    for query, step in (("kubernetes", "search_old_word"), ("会議", "search_cjk")):
        theirs = set(baseline[step]["value"]) - {"r_base"}
        assert theirs <= our_search(built, query)


# --- writing keeps the release working -----------------------------------------------------------


def _write(op: str, home: Path, scratch: Path) -> dict[str, Any]:
    """Apply one of our write operations; return what the comparison may allow."""
    if op == "db_migrate":
        _ok(hermes(home, "db", "migrate"))
        return {"skip_tables": ("schema_version",)}
    if op == "db_optimize":
        _ok(hermes(home, "db", "optimize"))
        return {}
    if op == "rename":
        _ok(hermes(home, "sessions", "rename", "s_cli_docker2", "Docker on arm64"))
        return {"may_change": {"sessions": {"title", "title_source"}}}
    if op == "delete":
        _ok(hermes(home, "sessions", "delete", "s_victim_2", "--yes"))
        return {"deleted": ("s_victim_2",)}
    if op == "prune":
        _ok(hermes(home, "sessions", "prune", "--older-than", "90d", "--yes"))
        return {"deleted": OLD_SESSIONS}
    if op == "restore":
        (scratch / "backups").mkdir()
        _ok(hermes(home, "backup", "-o", str(scratch / "backups")))
        archive = next((scratch / "backups").glob("*.zip"))
        _ok(hermes(home, "sessions", "delete", "s_victim_3", "--yes"))
        _ok(hermes(home, "restore", str(archive), "--yes"))
        return {}
    if op == "library":
        code = (
            "import sys; from hermes_state.agent.db import SessionDB\n"
            "db = SessionDB(sys.argv[1])\n"
            "db.create_session('lib_1', 'cli', model='m')\n"
            "db.append_messages('lib_1', [{'role': 'user', 'content': 'ocelot one'},"
            " {'role': 'assistant', 'content': 'ocelot two'}])\n"
            "db.compact_session('lib_1', [{'role': 'user', 'content': '[summary] ocelots'}])\n"
            "db.append_message('s_cli_docker2', 'user', 'library follow-up about ocelots')\n"
            "db.close()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(home / "state.db")],
            capture_output=True,
            text=True,
            env=child_env(home),
        )
        _ok(done)
        return {
            "skip_tables": ("schema_version",),
            "may_change": {"sessions": {"message_count", "last_activity_at", "tool_call_count"}},
        }
    raise AssertionError(op)


WRITES = ("db_migrate", "db_optimize", "rename", "delete", "prune", "restore", "library")


@pytest.mark.parametrize("op", WRITES)
def test_release_keeps_working_and_nothing_it_wrote_is_lost_after(
    op: str, built: Path, release: Release, baseline: dict[str, Any], scratch: Path
) -> None:
    before = dump(built / "state.db")
    allowed = _write(op, built, scratch)
    lost = lost_rows(
        before,
        dump(built / "state.db"),
        deleted_sessions=allowed.get("deleted", ()),
        may_change=allowed.get("may_change"),
        skip_tables=allowed.get("skip_tables", ()),
    )
    assert not lost, "\n".join(lost)
    _agent_still_works(release, built, baseline, op, deleted=allowed.get("deleted", ()))


def test_import_fits_every_release_layout_and_changes_no_schema(
    built: Path, release: Release, baseline: dict[str, Any]
) -> None:
    schema_before = _schema_state(built / "state.db")
    done = hermes(built, "sessions", "import", str(SAMPLE))
    # Two sample titles collide with the store's own: those two lines are refused, by name.
    assert done.returncode == 1, done.stderr
    assert "Imported 10 sessions (44 messages)" in done.stdout
    assert done.stderr.count("is already used by session") == 2
    if release.schema < 31:
        # The fields an older layout has no column for are named, not silently lost.
        assert "messages.message_uid (44)" in done.stderr
    else:
        assert "no column for these fields" not in done.stderr
    assert _schema_state(built / "state.db") == schema_before
    assert "20261119_073011_b7d401" in our_search(built, "東京")
    _agent_still_works(release, built, baseline, "import")


def test_release_opens_our_recovered_copy_with_every_row(
    built: Path, release: Release, baseline: dict[str, Any], scratch: Path
) -> None:
    target = scratch / "recovered.db"
    _ok(hermes(built, "sessions", "recover", "--to", str(target)))
    report = json.loads(Path(str(target) + ".recovery.json").read_text())
    assert report["layout"] == "source" and report["accepted"]
    assert report["verification"]["schema_version"] == release.schema
    source, copied = dump(built / "state.db"), dump(target)
    lost = lost_rows(source, copied, skip_tables=LEDGER)
    assert not lost, "\n".join(lost)
    assert "plugin_notes" in copied and "plugin_flag" in copied["sessions"][("s_cli_docker",)]
    home = scratch / "recovered-home"
    home.mkdir()
    (home / "state.db").write_bytes(target.read_bytes())  # closed: no process has it open
    _agent_still_works(release, home, baseline, "recovered")


def test_backup_archive_holds_every_row_of_the_store(
    built: Path, release: Release, scratch: Path
) -> None:
    import zipfile

    (scratch / "b").mkdir()
    _ok(hermes(built, "backup", "-o", str(scratch / "b")))
    archive = next((scratch / "b").glob("*.zip"))
    with zipfile.ZipFile(archive) as zf:
        (scratch / "x").mkdir()
        zf.extract("state.db", scratch / "x")
    lost = lost_rows(dump(built / "state.db"), dump(scratch / "x" / "state.db"))
    assert not lost, "\n".join(lost)


# --- migration: at least as good as the agent's own ----------------------------------------------


def test_after_our_migration_an_older_release_does_what_it_does_after_the_newest_ones(
    built: Path, release: Release, scratch: Path
) -> None:
    if release.schema == 31:
        pytest.skip("the newest release: the migration bar is about older ones")
    theirs = scratch / "theirs"
    copy_store(built, theirs)
    run_probe(BY_KEY["r31"], "open", theirs)  # the agent's own schema-31 release migrates it
    after_theirs = exercise(release, theirs, "bar")
    _ok(hermes(built, "db", "migrate"))
    after_ours = exercise(release, built, "bar")
    for name, step in after_theirs.items():
        if step["ok"]:
            assert after_ours[name]["ok"], f"{name}: {after_ours[name].get('error')}"
        if name.startswith("search") and step["ok"]:
            assert set(step["value"]) <= set(after_ours[name]["value"]), name
    assert not agent_problems(after_ours, after_theirs, "bar")


def test_migrate_records_schema_31_our_additions_and_upstreams_identity_objects(
    built: Path, release: Release
) -> None:
    _ok(hermes(built, "db", "migrate"))
    conn = sqlite3.connect(built / "state.db")
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
        additions = conn.execute(
            "SELECT value FROM state_meta WHERE key = 'hermes_additions'"
        ).fetchone()
        nulls = conn.execute("SELECT count(*) FROM messages WHERE message_uid IS NULL").fetchone()
    finally:
        conn.close()
    assert version == 31 and additions == ("1",) and nulls == (0,)
    assert {"messages_message_uid_insert", "idx_messages_session_uid", "hermes_cjk"} <= names
    done = hermes(built, "db", "check", "--json")
    _ok(done)


def test_migrate_keeps_the_releases_journal_mode(built: Path, release: Release) -> None:
    def mode() -> str:
        conn = sqlite3.connect(built / "state.db")
        try:
            return conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()

    before = mode()
    _ok(hermes(built, "db", "migrate"))
    _ok(hermes(built, "sessions", "rename", "s_cli_docker2", "Kept mode"))
    assert mode() == before


# --- stores we did not know, and our own older layout --------------------------------------------


def test_store_of_an_unknown_schema_is_browsed_and_every_write_refused(
    built: Path, release: Release
) -> None:
    conn = sqlite3.connect(built / "state.db")
    conn.execute("UPDATE schema_version SET version = 27")
    conn.commit()
    conn.close()
    before = file_digests(built)
    _ok(hermes(built, "sessions", "list"))
    for args in (
        ("sessions", "rename", "s_cli_docker2", "X"),
        ("sessions", "delete", "s_victim_1", "--yes"),
        ("sessions", "prune", "--older-than", "90d", "--yes"),
        ("sessions", "import", str(SAMPLE)),
        ("db", "migrate"),
        ("db", "optimize"),
    ):
        done = hermes(built, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "schema 27" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert file_digests(built) == before


def test_our_old_layout_breaks_the_release_until_db_migrate_repairs_it(
    built: Path, release: Release, baseline: dict[str, Any], scratch: Path
) -> None:
    from support.legacy_layout import make_legacy

    make_legacy(built / "state.db")
    refused = hermes(built, "sessions", "rename", "s_cli_docker2", "X")
    assert refused.returncode == 1 and "hermes db migrate" in refused.stderr
    assert "s_cli_docker" in our_search(built, "kubernetes")  # still readable as it is
    before = dump(built / "state.db")
    _ok(hermes(built, "db", "migrate"))
    lost = lost_rows(before, dump(built / "state.db"), skip_tables=("state_meta",))
    assert not lost, "\n".join(lost)
    _agent_still_works(release, built, baseline, "repaired")


# --- the agent's open changes nothing we made ---------------------------------------------------


def _schema_state(db: Path) -> tuple[int, list[tuple[str, str, str | None]]]:
    """Return the schema cookie and every schema object (type, name, sql) of a closed store."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        cookie = int(conn.execute("PRAGMA schema_version").fetchone()[0])
        objects = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        return cookie, [tuple(o) for o in objects]
    finally:
        conn.close()


def test_the_newest_release_opens_a_store_we_created_without_changing_its_schema(
    scratch: Path,
) -> None:
    # The uid and display triggers are the release's own text: it has nothing to recreate.
    home = scratch / "ours"
    home.mkdir()
    code = (
        "import sys; from pathlib import Path; from hermes_state.agent.db import SessionDB;"
        " db = SessionDB(Path(sys.argv[1])); db.create_session('s', 'cli');"
        " db.append_message('s', 'user', 'hello from us'); db.close()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(home / "state.db")],
        capture_output=True,
        text=True,
        env=child_env(home),
        timeout=120,
    )
    _ok(done)
    before = _schema_state(home / "state.db")
    run_probe(BY_KEY["r31"], "open", home)
    assert _schema_state(home / "state.db") == before
