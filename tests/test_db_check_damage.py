"""`hermes db check` on damaged stores: which objects and pages, the search indexes, the -wal,
and advice whose commands really repair the store. Real files damaged on purpose while closed;
the command runs as a real process, and the store is compared byte for byte afterwards."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from clitools import child, load_sample, run
from support.damage import damage, table_pages, zero_pages
from support.stores import bundle_digest, count_rows, settle

from hermes_state.store.diagnosis import wal_state


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store with the sample sessions, closed and settled."""
    path = load_sample()
    settle(path)
    return path


def check(*args: str) -> tuple[Any, Any]:
    """Run `hermes db check --json` as a process; return (its JSON, the process)."""
    proc = child("db", "check", "--json", *args)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return json.loads(proc.stdout), proc


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """Return the single `Error:` line of a process's stderr."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def without_shm(digests: dict[str, str]) -> dict[str, str]:
    """Leave out the -shm: SQLite's scratch, which a reader of a WAL store may create."""
    return {name: d for name, d in digests.items() if not name.endswith("-shm")}


def swap_index_roots(path: Path, first: str, second: str) -> None:
    """Make two indexes of one table point at each other's b-tree (their rows no longer match)."""
    conn = sqlite3.connect(path)
    try:
        roots = dict(
            conn.execute(
                "SELECT name, rootpage FROM sqlite_master WHERE name IN (?, ?)", (first, second)
            ).fetchall()
        )
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (roots[second], first))
        conn.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (roots[first], second))
        conn.commit()
    finally:
        conn.close()


def test_db_check_names_the_damaged_table_and_page_in_both_forms(sample: Path) -> None:
    page = table_pages(sample, "messages", "leaf")[1]
    zero_pages(sample, [page])
    before = bundle_digest(sample)
    data, proc = check()
    assert proc.returncode == 1 and data["ok"] is False
    assert {"object": "messages", "kind": "table", "page": page} in [
        {k: p[k] for k in ("object", "kind", "page")} for p in data["problems"]
    ]
    assert data["advice"]["action"] == "recover" and data["advice"]["rows_intact"] is False
    recover, restore = data["advice"]["commands"]
    assert recover.startswith("hermes sessions recover --to ") and restore.startswith(
        "hermes restore "
    )
    assert f"table messages (page {page})" in one_error_line(proc)
    human = child("db", "check")
    assert human.returncode == 1
    assert f"table messages (page {page}): " in human.stdout
    assert "What to do: " in human.stdout and recover in human.stdout
    assert bundle_digest(sample) == before


def test_db_check_on_a_damaged_index_page_says_every_row_is_intact(sample: Path) -> None:
    [root] = table_pages(sample, "idx_messages_session", "leaf")
    zero_pages(sample, [root])
    data, proc = check()
    assert proc.returncode == 1
    assert [(p["object"], p["kind"], p["page"]) for p in data["problems"]] == [
        ("idx_messages_session", "index", root)
    ]
    assert data["advice"]["action"] == "recover" and data["advice"]["rows_intact"] is True
    assert "nothing is lost" in data["advice"]["summary"]


def test_the_advice_for_a_damaged_index_repairs_the_store_without_losing_a_row(
    sample: Path,
) -> None:
    messages = count_rows(sample, "messages")
    zero_pages(sample, table_pages(sample, "idx_messages_session", "leaf"))
    data, _ = check()
    for command in data["advice"]["commands"]:
        args = command.split()[1:]  # after `hermes`
        proc = child(*args, "--yes") if args[0] == "restore" else child(*args)
        assert proc.returncode == 0, (command, proc.stderr)
    healthy, proc = check()
    assert proc.returncode == 0 and healthy["ok"] is True and healthy["problems"] == []
    assert count_rows(sample, "messages") == messages
    assert list(sample.parent.glob("state.db.pre-restore-*"))  # the damaged one kept aside


def test_db_check_maps_a_damaged_search_index_page_to_its_index(sample: Path) -> None:
    pages = table_pages(sample, "messages_fts_data", "leaf")
    zero_pages(sample, [pages[-1]])
    data, proc = check()
    assert proc.returncode == 1
    [problem] = data["problems"]
    assert (problem["object"], problem["kind"], problem["page"]) == (
        "messages_fts",
        "search_index",
        pages[-1],
    )
    assert "messages_fts_data" in problem["message"]
    states = {s["name"]: s["state"] for s in data["search_indexes"]}
    assert states["messages_fts"] == "damaged"
    assert states["messages_fts_trigram"] == "ok"


def test_indexes_that_disagree_with_their_table_are_rebuilt_in_place(sample: Path) -> None:
    swap_index_roots(sample, "idx_sessions_source", "idx_sessions_started")
    data, proc = check()
    assert proc.returncode == 1
    assert {p["object"] for p in data["problems"]} == {
        "idx_sessions_source",
        "idx_sessions_started",
    }
    assert all(p["kind"] == "index" and p["repair"] == "reindex" for p in data["problems"])
    assert "rows missing from index" in data["problems"][0]["message"]
    assert data["advice"]["action"] == "reindex"
    assert data["advice"]["commands"] == ["hermes db optimize --reindex"]
    assert "db optimize --reindex" in one_error_line(proc) + proc.stderr
    fixed = child("db", "optimize", "--reindex")
    assert fixed.returncode == 0, fixed.stderr
    assert "Rebuilt every index" in fixed.stdout
    after, proc = check()
    assert proc.returncode == 0 and after["ok"] is True


def test_db_check_says_a_garbage_wal_is_not_read_without_failing(sample: Path) -> None:
    conn = sqlite3.connect(sample)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    wal = Path(f"{sample}-wal")
    fd = os.open(wal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the store is closed
    os.write(fd, random.Random(5).randbytes(8192))
    os.close(fd)
    before = bundle_digest(sample)
    data, proc = check()
    assert proc.returncode == 0, proc.stderr
    assert data["wal"]["exists"] and data["wal"]["bytes"] == 8192
    assert data["wal"]["readable"] is False and data["wal"]["warning"] is True
    assert "not a WAL SQLite wrote" in data["wal"]["detail"]
    assert "warn  wal: state.db-wal is 8192 bytes" in child("db", "check").stdout
    assert without_shm(bundle_digest(sample)) == without_shm(before)


def test_db_check_judges_a_stray_wal_beside_a_rollback_store_as_sqlite_reads_it(
    sample: Path,
) -> None:
    # SQLite opens a -wal it finds beside a store whatever journal mode the header records.
    Path(f"{sample}-wal").write_bytes(b"\x01" * 4096)  # the store is closed
    data, proc = check()
    assert proc.returncode == 0
    assert data["wal"]["journal_mode"] == "wal" and data["wal"]["readable"] is False
    assert "4096 bytes, not a 32-byte header and whole 4120-byte frames" in data["wal"]["detail"]


def test_db_check_blames_a_stale_wal_when_the_main_file_alone_is_sound(sample: Path) -> None:
    conn = sqlite3.connect(sample)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    damage(sample, "stale-wal")
    before = bundle_digest(sample)
    data, proc = check()
    assert proc.returncode == 1
    assert "wal" in {p["kind"] for p in data["problems"]}
    assert any("main file alone is sound" in p["message"] for p in data["problems"])
    assert data["advice"]["action"] == "recover"
    assert without_shm(bundle_digest(sample)) == without_shm(before)


@pytest.mark.parametrize("kind", ["garbage", "header", "truncated", "btree"])
def test_db_check_diagnoses_a_store_sqlite_cannot_read_whole(sample: Path, kind: str) -> None:
    damage(sample, kind)
    before = bundle_digest(sample)
    data, proc = check()
    assert proc.returncode == 1 and data["ok"] is False and data["problems"]
    assert "hermes sessions recover" in proc.stderr
    assert data["advice"]["action"] == "recover"
    assert bundle_digest(sample) == before


def test_db_check_of_an_empty_file_points_at_the_backups(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"")
    data, proc = check()
    assert proc.returncode == 1
    assert data["advice"]["action"] == "restore"
    assert data["advice"]["commands"] == ["hermes backup list", "hermes restore ARCHIVE"]
    assert (hermes_home / "state.db").stat().st_size == 0


def test_db_check_of_a_healthy_store_has_no_problems_and_nothing_to_do(sample: Path) -> None:
    result = run("db", "check", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["problems"] == [] and data["advice"]["action"] == "none"
    assert {s["name"]: s["state"] for s in data["search_indexes"]} == {
        "hermes_cjk": "ok",
        "messages_fts": "ok",
        "messages_fts_trigram": "ok",
    }
    assert data["wal"]["exists"] is False


def test_wal_state_counts_whole_frames(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Path(f"{db}-wal").write_bytes(b"\0" * (32 + 3 * (4096 + 24)))
    state = wal_state(db, "wal", 4096)
    assert (state.frames, state.readable, state.warning) == (3, True, False)
