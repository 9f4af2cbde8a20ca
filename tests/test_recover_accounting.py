"""What recover says it lost adds up: per table and in total, lost = expected - recovered, the
expected counts match what the store held before the damage (exactly, or within a stated
tolerance where the report labels them estimates, naming the basis), and the placeholder
sessions it made are counted apart and named.

Each store is built through the library, settled and closed, then damaged by plain writes to a
copy of its file (pages overwritten with random bytes, as ``dd`` does; the file cut to 60 %),
and salvaged by the real ``hermes sessions recover`` process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import damage, stores
from test_recover_hang import (
    hard_time_limit,  # noqa: F401 (autouse: no test runs unbounded)
    recover_child,
)

from hermes_state.recover.recover_expect import PLACEHOLDER_GLOB
from hermes_state.recover.recover_report import BASES
from hermes_state.recover.recover_source import DERIVED_META_KEYS
from hermes_state.store.sql import quote

ESTIMATE_TOLERANCE = 0.02  # how far an estimated expected count may be from the true one
PLACEHOLDER_SQL = "source = 'recovered' AND title GLOB ?"


def ro(db: Path) -> sqlite3.Connection:
    """Open a closed, healthy store file read-only."""
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)


def table_rows(db: Path, table: str) -> int:
    """Count a table's rows as recover counts them (state_meta without derived keys, sessions
    without placeholders)."""
    conn = ro(db)
    try:
        if table == "state_meta":
            keys = [k for (k,) in conn.execute("SELECT key FROM state_meta")]
            return sum(1 for k in keys if k not in DERIVED_META_KEYS)
        where, params = "", []
        if table == "sessions":
            where, params = f" WHERE NOT ({PLACEHOLDER_SQL})", [PLACEHOLDER_GLOB]
        return int(
            conn.execute(f"SELECT count(*) FROM {quote(table)}{where}", params).fetchone()[0]
        )
    finally:
        conn.close()


def placeholder_ids(db: Path) -> set[str]:
    """Return the ids of the placeholder sessions in a recovered store."""
    conn = ro(db)
    try:
        rows = conn.execute(f"SELECT id FROM sessions WHERE {PLACEHOLDER_SQL}", (PLACEHOLDER_GLOB,))
        return {str(r[0]) for r in rows}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A settled store of 300 sessions, 3,000 messages and 300 usage rows, closed."""
    db = tmp_path_factory.mktemp("accounting") / "base" / "state.db"
    stores.populate_store(db, sessions_n=300, messages_per_session=10, content_size=200)
    stores.settle(db)
    stores.drop_sidecars(db)
    return db


def truth(db: Path, tables: list[str]) -> dict[str, int]:
    """Return each table's rows in the healthy store."""
    return {t: table_rows(db, t) for t in tables}


def garble_pages(db: Path, seed: int = 9) -> None:
    """Overwrite middle leaf pages of sessions, messages and usage with random bytes (as dd)."""
    size = damage.page_size(db)
    chosen = []
    for table, n in (("sessions", 1), ("messages", 3), ("session_model_usage", 1)):
        leaves = damage.table_pages(db, table)
        chosen += leaves[len(leaves) // 2 : len(leaves) // 2 + n]
    rng = random.Random(seed)
    fd = os.open(db, os.O_WRONLY)
    try:
        for page in chosen:
            os.pwrite(fd, rng.randbytes(size), (page - 1) * size)
    finally:
        os.close(fd)


def damaged_copy(healthy: Path, tmp_path: Path, kind: str) -> Path:
    """Copy the closed healthy store and damage the copy."""
    db = tmp_path / "damaged" / "state.db"
    db.parent.mkdir()
    shutil.copyfile(healthy, db)
    if kind == "garbage":
        garble_pages(db)
    else:
        damage.truncate_store(db, 0.6)
    stores.drop_sidecars(db)
    return db


def recover_json(source: Path, target: Path) -> dict[str, Any]:
    """Run `hermes sessions recover --allow-partial --json`; return the printed report."""
    proc = recover_child(source, target, "--allow-partial", "--json")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def assert_adds_up(report: dict[str, Any], before: dict[str, int], target: Path) -> None:
    """Check every table's and the total's figures against the true counts and the target."""
    tables = {n: t for n, t in report["tables"].items() if t["status"] != "absent"}
    assert set(tables) == set(before)
    for name, t in tables.items():
        true = before[name]
        assert t["recovered"] == t["copied"] == table_rows(target, name), (name, t)
        assert t["recovered"] + t["lost"] == t["expected"], (name, t)
        assert t["expected_basis"] in BASES and t["expected_from"] == BASES[t["expected_basis"]]
        if t["expected_estimated"]:
            assert abs(t["expected"] - true) <= ESTIMATE_TOLERANCE * true, (name, true, t)
        else:
            assert t["expected"] == true, (name, true, t)
    totals = report["totals"]
    # Every table once: the total is the sum of the tables, nothing counted twice.
    assert totals["expected"] == sum(t["expected"] for t in tables.values())
    assert totals["recovered"] == sum(t["recovered"] for t in tables.values())
    assert totals["lost"] == sum(t["lost"] for t in tables.values())
    assert totals["recovered"] + totals["lost"] == totals["expected"]
    assert totals["estimated"] == any(t["expected_estimated"] for t in tables.values())
    ids = placeholder_ids(target)
    assert report["placeholder_sessions"] == tables["sessions"]["placeholders"] == len(ids)
    assert set(report["placeholder_session_ids"]) == ids


def test_recover_of_garbage_pages_reports_lost_as_expected_minus_recovered(
    healthy: Path, tmp_path: Path
) -> None:
    db = damaged_copy(healthy, tmp_path, "garbage")
    target = tmp_path / "out.db"
    report = recover_json(db, target)
    before = truth(healthy, list(report["tables"]))
    assert_adds_up(report, before, target)
    lost = {n: t["lost"] for n, t in report["tables"].items() if t["lost"]}
    assert set(lost) == {"sessions", "messages", "session_model_usage"}, lost
    assert report["totals"]["expected"] == sum(before.values())
    # The lost sessions' messages that survived hang from placeholders; none counts as kept.
    assert report["placeholder_sessions"] > 0
    assert report["placeholder_sessions"] <= report["tables"]["sessions"]["lost"]


def test_recover_json_output_and_report_file_carry_the_same_figures(
    healthy: Path, tmp_path: Path
) -> None:
    db = damaged_copy(healthy, tmp_path, "garbage")
    target = tmp_path / "out.db"
    printed = recover_json(db, target)
    written = json.loads(Path(str(target) + ".recovery.json").read_text(encoding="utf-8"))
    assert printed == written
    assert printed["summary"].startswith(
        f"PARTIAL: lost {printed['totals']['lost']:,} of {printed['totals']['expected']:,} rows"
    )


def test_recover_of_garbage_pages_first_line_says_how_much_was_lost(
    healthy: Path, tmp_path: Path
) -> None:
    db = damaged_copy(healthy, tmp_path, "garbage")
    target = tmp_path / "out.db"
    proc = recover_child(db, target, "--allow-partial")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    report = json.loads(Path(str(target) + ".recovery.json").read_text(encoding="utf-8"))
    before = truth(healthy, list(report["tables"]))
    recovered = sum(table_rows(target, t) for t in before)
    expected = sum(before.values())
    made = len(placeholder_ids(target))
    assert lines[0] == (
        f"PARTIAL: lost {expected - recovered:,} of {expected:,} rows, recovered "
        f"{recovered:,}; {made} placeholder sessions created"
    )
    for name in ("sessions", "messages", "session_model_usage"):
        lost = before[name] - table_rows(target, name)
        assert (
            f"  {name}: lost {lost:,} of {before[name]:,} (from SQLite's count of the source table)"
            in lines
        )
    [named] = [line for line in lines if "placeholder sessions created (not recovered" in line]
    assert named.startswith(f"  {made} placeholder sessions") and "--source recovered" in named
    assert "'[recovered N] session metadata was unreadable'" in named


def test_recover_of_a_store_cut_to_60_percent_labels_its_estimates(
    healthy: Path, tmp_path: Path
) -> None:
    db = damaged_copy(healthy, tmp_path, "cut")
    target = tmp_path / "out.db"
    report = recover_json(db, target)
    before = truth(healthy, list(report["tables"]))
    assert_adds_up(report, before, target)
    assert report["totals"]["lost"] > 0 and report["pages_missing"] > 0
    guessed = [n for n, t in report["tables"].items() if t["expected_estimated"]]
    assert guessed and report["totals"]["estimated"]
    assert f"(estimated for {', '.join(guessed)})" in report["summary"]


def test_recover_of_a_store_cut_to_60_percent_says_what_each_estimate_is_from(
    healthy: Path, tmp_path: Path
) -> None:
    db = damaged_copy(healthy, tmp_path, "cut")
    target = tmp_path / "out.db"
    proc = recover_child(db, target, "--allow-partial")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(Path(str(target) + ".recovery.json").read_text(encoding="utf-8"))
    lines = proc.stdout.splitlines()
    assert lines[0] == report["summary"] and lines[0].startswith("PARTIAL: lost ")
    for name, t in report["tables"].items():
        if not t["expected_estimated"]:
            continue
        basis = BASES[t["expected_basis"]]
        line = f"  {name}: lost {t['lost']:,} of {t['expected']:,} (estimated from {basis})"
        assert any(x.startswith(line) for x in lines), (line, lines)
    assert any(x.startswith("  The file is cut short: ") for x in lines)
