"""The registry of release families (issue 33): one entry per schema number in the field, and a
store stamped with a number no release writes (27, 40) reads with a note naming the nearest
family while every write refuses, naming the number, and changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hostile_env import assert_one_line_error, digest, hermes, listing
from support.stores import populate_store, settle

from hermes_state.store import layout, releases, schema

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample-sessions.jsonl"
WRITES = {
    "rename": ["sessions", "rename", "sess-1-00002", "new title"],
    "delete": ["sessions", "delete", "sess-1-00002", "--yes"],
    "pin": ["sessions", "pin", "sess-1-00002"],
    "import": ["sessions", "import", str(SAMPLE)],
    "migrate": ["db", "migrate", "--force"],
    "optimize": ["db", "optimize", "--force"],
}


def test_every_schema_number_in_the_field_has_one_family() -> None:
    assert releases.KNOWN_VERSIONS == (11, 13, 14, 16, 17, 19, 22, 25, 26, 30, 31)
    assert schema.KNOWN_VERSIONS == releases.KNOWN_VERSIONS
    assert schema.SCHEMA_VERSION == releases.NEWEST.schema == 31
    named = [spec for fam in releases.FAMILIES for spec in fam.releases]
    assert len(named) == len(set(named)) == 24  # sixteen stock + forks and async variants
    # The layouts the issue names: no messages.active before 14; external FTS from 25.
    assert [f.schema for f in releases.FAMILIES if not f.has_active] == [11, 13]
    assert [f.schema for f in releases.FAMILIES if f.fts == "external"] == [25, 26, 30, 31]
    assert releases.family(25) and releases.TOOL_ROWS in releases.BY_SCHEMA[25].trigram_leaves_out
    assert releases.CRON_SUBAGENT in releases.BY_SCHEMA[30].trigram_leaves_out
    assert releases.CRON_SUBAGENT not in releases.BY_SCHEMA[26].trigram_leaves_out
    assert releases.BY_SCHEMA[22].journal == "wal"
    assert releases.BY_SCHEMA[25].journal == "delete_on_vulnerable"


def test_a_column_names_the_first_release_that_has_it() -> None:
    pinned = releases.first_with("sessions.pinned")
    active = releases.first_with("messages.active")
    assert pinned is not None and pinned.schema == 25
    assert active is not None and active.first_release == "hermes-agent 0.16.0"
    assert releases.first_with("sessions.no_such_column") is None


@pytest.mark.parametrize(
    ("number", "near"), [(27, 26), (28, 26), (29, 30), (12, 11), (40, 31), (5, 11)]
)
def test_the_nearest_family_of_an_unknown_number(number: int, near: int) -> None:
    assert releases.family(number) is None
    assert releases.nearest(number).schema == near


def _stamp(db: Path, version: int) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE schema_version SET version = ?", (version,))
    conn.close()


@pytest.fixture
def store(hermes_home: Path) -> Path:
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=12, messages_per_session=3, content_size=100)
    settle(db)
    return db


@pytest.mark.parametrize(("number", "near"), [(27, 26), (40, 31)])
def test_unknown_number_reads_with_a_note_naming_the_nearest_family(
    store: Path, number: int, near: int
) -> None:
    _stamp(store, number)
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        found = layout.inspect(conn)
    finally:
        conn.close()
    assert found.family is None and f"schema {near})" in (found.nearest_note() or "")
    proc = hermes("sessions", "list", "--limit", "0", home=store.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("sess-") == 12
    assert f"nearest: {releases.BY_SCHEMA[near].name}" in proc.stderr


@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("number", [27, 40])
def test_unknown_number_refuses_every_write_naming_it(store: Path, name: str, number: int) -> None:
    _stamp(store, number)
    home = store.parent
    files = {p: digest(p) for p in home.rglob("*") if p.is_file()}
    tree = listing(home)
    line = assert_one_line_error(hermes(*WRITES[name], home=home), 1)
    assert f"schema {number}" in line
    assert listing(home) == tree
    assert {p: digest(p) for p in files} == files


def test_db_check_names_the_family_of_a_known_store(store: Path) -> None:
    proc = hermes("db", "check", home=store.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"v31: {releases.BY_SCHEMA[31].name}" in proc.stdout
