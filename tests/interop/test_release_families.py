"""Every layout family in the field (issue 33), against the release that writes it.

One release per schema number (tests/interop/releases.py ``FAMILY_RELEASES``: 0.13.0 … iot
0.22.2.post1) builds a small store with its own SessionDB (family_probe.py: 30 sessions, tool
output, cron and subagent sessions, CJK text, system prompts, old ended sessions). Then, as
separate `hermes` processes on that store:

- reads equal the ground truth of raw SQL: every message of a session (a layout without
  ``messages.active`` reads all of them as live), a word, a substring only tool output holds and
  a CJK phrase (the agent's own substring index leaves tool rows out from schema 25 and cron or
  subagent sessions from 30: the answer still has them and says complete);
- `db check` exits 0 and names the release family;
- writes in the store's own layout (rename, delete, export + import, optimize, prune with and
  without VACUUM, pin where the layout has the column, else one refusal naming it), with schema
  version and journal mode unchanged;
- backup restores into an empty home and over the store; the file `sessions recover --to`
  writes restores too;
- the release opens the edited store, appends, searches, renames and deletes, and its
  integrity_check and FTS5 integrity-checks stay ok;
- `db migrate` runs the release line's data steps (system prompts stored by hash below 25) and
  the release still works afterwards.

A release that cannot be installed skips with pip's reason.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state.store import releases as families
from interop.harness import hermes
from interop.releases import FAMILY_RELEASES, Release, ReleaseUnavailable, python_for, run_probe

FAMILY_PROBE = Path(__file__).with_name("family_probe.py")
FRAGMENT = "zfragmen"  # a substring of the tool-output word (no token of its own)
CJK = "会議の議事録"


@pytest.fixture(params=FAMILY_RELEASES, ids=[r.key for r in FAMILY_RELEASES])
def family_release(request: pytest.FixtureRequest) -> Release:
    """Each family's release in turn (skipped, with pip's reason, when it cannot be installed)."""
    rel: Release = request.param
    try:
        python_for(rel)
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    return rel


def _ok(done: Any) -> Any:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _sql(home: Path, query: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def _shape(home: Path) -> tuple[int, str]:
    """The store's schema version and journal mode (what no command but migrate may change)."""
    version = _sql(home, "SELECT version FROM schema_version")[0][0]
    mode = _sql(home, "PRAGMA journal_mode")[0][0]
    return int(version), str(mode)


def _counts(home: Path) -> tuple[int, int]:
    return (
        _sql(home, "SELECT count(*) FROM sessions")[0][0],
        _sql(home, "SELECT count(*) FROM messages")[0][0],
    )


def _search(home: Path, query: str) -> dict[str, Any]:
    done = _ok(hermes(home, "sessions", "search", query, "--json", "--limit", "500"))
    return json.loads(done.stdout)


def _release_works(release: Release, home: Path, tag: str) -> None:
    """The release opens the store, appends, searches, renames, deletes; integrity stays ok."""
    steps = run_probe(release, "exercise", home, tag)["steps"]
    failed = {k: v["error"] for k, v in steps.items() if not v["ok"]}
    assert not failed, failed
    assert steps["search_new_word"]["value"] == [f"r_{tag}"]
    integrity = steps["integrity"]["value"]
    assert integrity["integrity_check"] == ["ok"]
    assert set(integrity["fts"].values()) == {"ok"}, integrity


def test_release_family_reads_writes_restores_and_keeps_working(
    family_release: Release, tmp_path: Path
) -> None:
    release = family_release
    family = families.family(release.schema)
    assert family is not None
    template = tmp_path / "template"
    template.mkdir()
    run_probe(release, "build", template, script=FAMILY_PROBE)
    home = tmp_path / "home"
    shutil.copytree(template, home)
    shape = _shape(home)
    assert shape[0] == release.schema

    # db check: healthy, and names the family.
    done = _ok(hermes(home, "db", "check"))
    assert f"v{release.schema}: {family.name}" in done.stdout

    # Reads equal the ground truth.
    shown = json.loads(_ok(hermes(home, "sessions", "show", "s000", "--json")).stdout)
    stored = _sql(home, "SELECT id FROM messages WHERE session_id = 's000' ORDER BY id")
    assert [m["id"] for m in shown["messages"]] == [r[0] for r in stored]
    for query in ("qxzfragment", FRAGMENT, CJK):
        truth = _sql(
            home,
            "SELECT count(*) FROM messages WHERE content LIKE ?",
            f"%{query}%",
        )[0][0]
        found = _search(home, query)
        assert (found["matches"], found["complete"]) == (truth, True), (query, found)
        narrowed = json.loads(
            _ok(hermes(home, "sessions", "search", query, "--json", "--role", "user")).stdout
        )
        assert narrowed["matches"] <= found["matches"]  # a filter never adds hits

    # Writes in the store's own layout.
    _ok(hermes(home, "sessions", "rename", "s001", "Renamed by hermes"))
    _ok(hermes(home, "sessions", "delete", "s003", "--yes"))
    pin = hermes(home, "sessions", "pin", "s005")
    if family.has("sessions.pinned"):
        _ok(pin)
    else:
        assert pin.returncode == 1 and "Traceback" not in pin.stderr
        assert "sessions.pinned" in pin.stderr and "hermes db migrate" in pin.stderr
    exported = tmp_path / "s009.jsonl"
    kept = _sql(home, "SELECT id, content FROM messages WHERE session_id = 's009' ORDER BY id")
    _ok(hermes(home, "sessions", "export", "--session-id", "s009", "-o", str(exported)))
    _ok(hermes(home, "sessions", "delete", "s009", "--yes"))
    top = _sql(home, "SELECT max(id) FROM messages")[0][0]
    _ok(hermes(home, "sessions", "import", str(exported)))
    back = _sql(home, "SELECT id, content FROM messages WHERE session_id = 's009' ORDER BY id")
    # Text and order kept; the ids the deletion freed are never reused (issue 39.3): the
    # session comes back above every id the store has used.
    assert [c for _i, c in back] == [c for _i, c in kept]
    assert all(i > max(top or 0, *(k for k, _c in kept)) for i, _c in back)
    _ok(hermes(home, "db", "optimize"))
    before = _counts(home)
    _ok(hermes(home, "sessions", "prune", "--older-than", "100d", "--yes"))
    assert _counts(home)[0] == before[0] - 6  # the six sessions aged 200 days
    _ok(hermes(home, "sessions", "prune", "--older-than", "1d", "--source", "cron", "--compact",
               "--yes"))  # fmt: skip
    assert _sql(home, "SELECT title FROM sessions WHERE id = 's001'") == [("Renamed by hermes",)]
    assert _shape(home) == shape

    # Backup -> restore into an empty home and over the store; recover --to restores too.
    counts = _counts(home)
    archive = tmp_path / "b.zip"
    _ok(hermes(home, "backup", "-o", str(archive)))
    empty = tmp_path / "empty"
    empty.mkdir()
    _ok(hermes(empty, "restore", str(archive), "--yes"))
    assert _counts(empty) == counts and _shape(empty) == shape
    _ok(hermes(home, "restore", str(archive), "--yes"))
    assert _counts(home) == counts
    recovered = tmp_path / "recovered.db"
    _ok(hermes(home, "sessions", "recover", "--to", str(recovered)))
    other = tmp_path / "other"
    other.mkdir()
    _ok(hermes(other, "restore", str(recovered), "--yes"))
    assert _counts(other) == counts

    # The release keeps working on the store we edited and restored.
    _release_works(release, home, "after_hermes")

    # db migrate: the release line's data steps, and the release that wrote it still works.
    migrated = tmp_path / "migrated"
    shutil.copytree(template, migrated)
    _ok(hermes(migrated, "db", "migrate"))
    assert _shape(migrated)[0] == families.NEWEST.schema
    prompts = _sql(
        migrated,
        "SELECT count(*), count(s.system_prompt_hash), count(p.hash) FROM sessions s "
        "LEFT JOIN system_prompts p ON p.hash = s.system_prompt_hash "
        "WHERE COALESCE(s.system_prompt, p.prompt) IS NOT NULL",
    )[0]
    assert prompts[0] == 30 and prompts[1] == prompts[2] == 30, prompts
    _release_works(release, migrated, "after_migrate")
