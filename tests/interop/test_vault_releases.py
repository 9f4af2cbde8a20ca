"""SPEC §19/§21 against the real Hermes Agent releases: a vault store made from a store a release
wrote is one that release can open read-only and read every moved session and message from; its
search finds them there; the release keeps working on the live store after the move; and after
`hermes vault return` it sees the sessions in the live store again, unchanged.

"The release opens it read-only" means the release's own ``SessionDB(db_path, read_only=True)``
(a ``mode=ro`` connection, no schema work) on the vault file itself, which must not change a byte.
R22's read-only handle never searches (it skips its FTS probe and returns no hits by design), so
search is proven with each release's ordinary open on a copy of the vault file as well.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from interop.harness import agent_problems, exercise, hermes
from interop.releases import Release, run_probe

DAY = 86400.0
# The build's old sessions (200 days old) and two whole groups we age by another 400 days: a
# chain with an in-place compaction and a compression child, and a session with its delegated
# run, tool calls and reasoning. The rest (CJK, cron, victims) stays live for the agent.
OLD = ("s_old_1", "s_old_2", "s_old_3")
AGED = ("s_cli_docker", "s_subagent", "s_chain_root", "s_chain_child")
MOVED = (*OLD, *AGED)
AGE_S = 400 * DAY
# A word of each moved group, and who has it.
QUERIES = {
    "dockerfile": {"s_cli_docker", "s_subagent"},
    "grafana": {"s_chain_root", "s_chain_child"},
    "wombat": set(OLD),
}


def _ok(done: Any) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def _age(home: Path) -> None:
    """Make the AGED sessions ended and last active 400 days earlier (no process has the store)."""
    conn = sqlite3.connect(home / "state.db")
    try:
        with conn:
            qs = ",".join("?" * len(AGED))
            cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
            conn.execute(
                "UPDATE sessions SET ended_at = COALESCE(ended_at, (SELECT max(timestamp) FROM"
                " messages m WHERE m.session_id = sessions.id), started_at),"
                f" end_reason = COALESCE(end_reason, 'user_exit') WHERE id IN ({qs})",
                AGED,
            )
            conn.execute(
                "UPDATE sessions SET started_at = started_at - ?, ended_at = ended_at - ?"
                f" WHERE id IN ({qs})",
                (AGE_S, AGE_S, *AGED),
            )
            if "last_activity_at" in cols:
                conn.execute(
                    "UPDATE sessions SET last_activity_at = last_activity_at - ?"
                    f" WHERE id IN ({qs}) AND last_activity_at IS NOT NULL",
                    (AGE_S, *AGED),
                )
            conn.execute(
                f"UPDATE messages SET timestamp = timestamp - ? WHERE session_id IN ({qs})",
                (AGE_S, *AGED),
            )
    finally:
        conn.close()


def _read(
    release: Release, home: Path, db: Path, mode: str, ids: tuple[str, ...] = MOVED
) -> dict[str, Any]:
    """What the release reads of ids, and finds for QUERIES, in the store at db."""
    return run_probe(release, "read", home, str(db), mode, ",".join(ids), ",".join(QUERIES))


def _vault_files(home: Path) -> list[Path]:
    return sorted((home / "vault").glob("[0-9][0-9][0-9][0-9].db"))


def _ids_in(db: Path) -> tuple[str, ...]:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return tuple(sorted(r[0] for r in conn.execute("SELECT id FROM sessions")))
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _move(home: Path) -> dict[str, Any]:
    """Move everything older than 100 days into the vault (the groups aged already)."""
    done = hermes(home, "vault", "move", "--older-than", "100d", "--yes", "--json")
    _ok(done)
    result: dict[str, Any] = json.loads(done.stdout)
    assert sorted(result["session_ids"]) == sorted(MOVED), result
    return result


def test_release_reads_every_vaulted_session_read_only(built: Path, release: Release) -> None:
    _age(built)
    before = _read(release, built, built / "state.db", "ro")
    assert all(before["sessions"][s] is not None for s in MOVED)
    _move(built)
    files = _vault_files(built)
    assert files
    sessions: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for path in files:
        digest = _digest(path)
        got = _read(release, built, path, "ro", _ids_in(path))
        assert _digest(path) == digest, f"the release's read-only open changed {path.name}"
        assert not (built / "vault" / f"{path.name}-wal").exists()
        sessions.update(got["sessions"])
        messages.update(got["messages"])
    assert sessions == before["sessions"]
    assert {s: len(m) for s, m in messages.items()} == {
        s: len(m) for s, m in before["messages"].items()
    }
    assert messages == before["messages"]
    assert sum(map(len, messages.values())) >= 20


def test_release_search_finds_vaulted_messages(built: Path, release: Release) -> None:
    _age(built)
    _move(built)
    found: dict[str, set[str]] = {q: set() for q in QUERIES}
    for path in _vault_files(built):
        ro = _read(release, built, path, "ro", ())
        if ro["fts_enabled"]:  # R30/R31: its read-only handle searches too
            for q, hits in ro["search"].items():
                assert set(hits) == QUERIES[q] & set(_ids_in(path)), (path.name, q, hits)
        # The release's ordinary open, as if the vault store were its own state.db (a copy:
        # the vault file is never the agent's to open for writing).
        copy = built / "copies" / path.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(path, copy)
        rw = _read(release, built, copy, "rw", ())
        for q, hits in rw["search"].items():
            found[q] |= set(hits)
        checked = run_probe(release, "integrity", built, str(copy))
        assert checked["integrity_check"] == ["ok"] and set(checked["fts"].values()) == {"ok"}
    assert found == QUERIES


def test_release_keeps_working_on_the_live_store_after_a_move(
    built: Path, release: Release, baseline: dict[str, Any]
) -> None:
    _age(built)
    _move(built)
    steps = exercise(release, built, "aftermove")
    problems = agent_problems(steps, baseline, "aftermove", deleted_sessions=MOVED)
    assert not problems, "\n".join(problems)
    gone = _read(release, built, built / "state.db", "ro")
    assert all(gone["sessions"][s] is None for s in MOVED)  # the agent never sees the vault


def test_returned_sessions_are_the_releases_again(
    built: Path, release: Release, baseline: dict[str, Any]
) -> None:
    _age(built)
    before = _read(release, built, built / "state.db", "ro")
    _move(built)
    exercise(release, built, "between")  # the agent writes to the live store meanwhile
    done = hermes(built, "vault", "return", *MOVED, "--json")
    _ok(done)
    back = json.loads(done.stdout)
    assert sorted(back["session_ids"]) == sorted(MOVED) and back["renumbered"] == 0
    assert all(not _ids_in(p) for p in _vault_files(built))
    after = _read(release, built, built / "state.db", "ro")
    assert after["sessions"] == before["sessions"]
    assert after["messages"] == before["messages"]
    steps = exercise(release, built, "returned")
    problems = agent_problems(steps, baseline, "returned")
    assert not problems, "\n".join(problems)
    searched = _read(release, built, built / "state.db", "rw", ())
    assert {q: set(h) & set(MOVED) for q, h in searched["search"].items()} == QUERIES


def test_a_vaulted_chat_the_release_resumes_is_one_conversation_never_lost(
    built: Path, release: Release, baseline: dict[str, Any]
) -> None:
    """The release resumes a vaulted session by id (a new live session with that id); a later
    move keeps its vaulted history, reads show both parts, and `vault return` joins them into
    the one session the release then reads whole (issue 39, item 1)."""
    _age(built)
    sid = "s_cli_docker"
    before = _read(release, built, built / "state.db", "ro", (sid,))["messages"][sid]
    moved = hermes(built, "vault", "move", "--older-than", "300d", "--yes", "--json")
    _ok(moved)
    assert sid in json.loads(moved.stdout)["session_ids"]
    run_probe(release, "resume", built, sid, "3")
    again = hermes(built, "vault", "move", "--older-than", "100d", "--yes", "--json")
    _ok(again)
    result = json.loads(again.stdout)
    assert sorted(result["session_ids"]) == sorted(OLD) and result["resumed"] == [sid]
    check = hermes(built, "vault", "check", "--json")
    _ok(check)
    shown = hermes(built, "sessions", "show", sid, "--all", "--format", "jsonl")
    _ok(shown)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len(rows) == len(before) + 3
    assert [r["content"] for r in rows[-3:]] == [f"resumed axolotl {i}" for i in range(3)]
    joined = hermes(built, "vault", "return", sid, "--json")
    _ok(joined)
    assert json.loads(joined.stdout)["joined"] == [sid]
    after = _read(release, built, built / "state.db", "ro", (sid,))["messages"][sid]
    assert len(after) == len(before) + 3
    assert [m["content"] for m in after[: len(before)]] == [m["content"] for m in before]
    assert sid not in {s for p in _vault_files(built) for s in _ids_in(p)}
    steps = exercise(release, built, "joined")
    problems = agent_problems(steps, baseline, "joined", deleted_sessions=OLD)
    assert not problems, "\n".join(problems)
