"""The change feed (`sessions export --after-id N`) is complete: beside a real writer process,
every message it commits appears in exactly one feed batch, and imported messages reach later
feeds. Real stores, a real writer subprocess and the real `hermes` process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import child, run
from support.children import child_env

from hermes_state.records import messages, sessions
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer import export, portability

WRITER = """
import sys, time
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store

path, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
store = open_store(path)
ids = [f"w{i:02d}" for i in range(count)]
for i, sid in enumerate(ids):
    sessions.create_session(store, sid, "cli", started_at=1_700_000_000.0 + i)
print("ready", flush=True)
deadline = time.monotonic() + seconds
k = 0
while time.monotonic() < deadline:
    # Round robin: sessions a feed window has already read keep getting messages.
    messages.append_messages(store, ids[k % count], [{"role": "user", "content": f"m{k}"}])
    k += 1
    time.sleep(0.002)  # an agent's pace (hundreds a second), not a lock held back to back
store.close()
print(k, flush=True)
"""
NEXT = re.compile(r"Highest message id: (\d+) \(next run: --after-id (\d+)\)")


def _record(sid: str, started_at: float, n: int = 2) -> dict[str, Any]:
    msgs = [
        {"role": "user", "content": f"{sid} {i}", "timestamp": started_at + i} for i in range(n)
    ]
    return {"id": sid, "source": "cli", "started_at": started_at, "messages": msgs}


def _all_ids(path: Path) -> list[int]:
    with open_store(path, read_only=True) as s:
        return [r[0] for r in s.conn.execute("SELECT id FROM messages ORDER BY id")]


def _batch(store: Store, after: int) -> tuple[list[int], int]:
    """Read one feed batch as the CLI does: the mark first, then ids in (after, mark]."""
    mark = export.feed_mark(store)
    got = [
        m["id"]
        for record in export.export_all(store, after_id=after, upto_id=mark)
        for m in record["messages"]
    ]
    return got, max(after, mark)


@pytest.fixture
def writer(hermes_home: Path) -> Iterator[subprocess.Popen[str]]:
    """A real process appending to 12 sessions of the test profile for 3 seconds."""
    path = default_db_path()
    open_store(path).close()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "12", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _finish(proc: subprocess.Popen[str]) -> int:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return int(out.strip().splitlines()[-1])


def test_every_message_a_concurrent_writer_commits_is_in_exactly_one_feed_batch(
    writer: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows of one or two sessions: a batch spans many read transactions while the writer
    # commits to sessions read earlier and to sessions not read yet.
    monkeypatch.setattr(export, "MESSAGE_CHUNK", 2)
    monkeypatch.setattr(export, "READ_WINDOW_S", 0.0)
    seen: Counter[int] = Counter()
    after, batches = 0, 0
    with open_store(default_db_path(), read_only=True) as store:
        while writer.poll() is None:
            got, after = _batch(store, after)
            seen.update(got)
            batches += 1
        got, after = _batch(store, after)  # the writer has stopped: the rest
        seen.update(got)
    written = _finish(writer)
    stored = _all_ids(default_db_path())
    assert len(stored) == written > 50
    assert batches >= 3
    assert sorted(seen) == stored  # every message once: none missed, none twice
    assert set(seen.values()) == {1}
    assert after == stored[-1]


def test_the_cli_feed_in_a_loop_beside_a_writer_sees_every_message_once(
    writer: subprocess.Popen[str], tmp_path: Path
) -> None:
    seen: Counter[int] = Counter()
    after, batches = 0, 0
    while True:
        running = writer.poll() is None
        done = child("sessions", "export", "--after-id", str(after), "-o", "-")
        assert done.returncode == 0, done.stderr
        for line in done.stdout.splitlines():
            record = json.loads(line)
            assert record["messages_after_id"] == after
            seen.update(m["id"] for m in record["messages"])
        m = NEXT.search(done.stderr)
        assert m is not None, done.stderr
        assert m.group(1) == m.group(2)
        after = int(m.group(1))
        batches += 1
        if not running:
            break
    written = _finish(writer)
    stored = _all_ids(default_db_path())
    assert len(stored) == written
    assert batches >= 2
    assert sorted(seen) == stored
    assert set(seen.values()) == {1}


def test_a_message_committed_while_a_feed_reads_comes_in_the_next_batch_only(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "MESSAGE_CHUNK", 1)  # one session per read window
    with open_store(default_db_path()) as store:
        assert portability.import_sessions(
            store, [_record("a", 1000.0), _record("b", 2000.0), _record("c", 3000.0)]
        ).ok  # a: 1-2, b: 3-4, c: 5-6
        mark = export.feed_mark(store)
        assert mark == 6
        records = export.export_all(store, after_id=0, upto_id=mark)
        first = next(records)
        assert first["id"] == "a"
        ids = [m["id"] for m in first["messages"]]
        # Committed now: to a, already read (id 7), and to c, not read yet (id 8).
        messages.append_messages(store, "a", [{"role": "user", "content": "late a"}])
        messages.append_messages(store, "c", [{"role": "user", "content": "late c"}])
        rest = [(r["id"], [m["id"] for m in r["messages"]]) for r in records]
        assert rest == [("b", [3, 4]), ("c", [5, 6])]  # 8 is above this batch's mark
        ids += [i for _sid, got in rest for i in got]
        nxt = export.feed_mark(store)
        later = [
            (r["id"], [m["id"] for m in r["messages"]])
            for r in export.export_all(store, after_id=mark, upto_id=nxt)
        ]
    assert ids == [1, 2, 3, 4, 5, 6]
    assert later == [("a", [7]), ("c", [8])]


def test_imported_messages_reach_the_next_feed(hermes_home: Path, tmp_path: Path) -> None:
    with open_store(default_db_path()) as store:
        assert portability.import_sessions(store, [_record("a", 1000.0, n=4)]).ok  # 1-4
        store.write(lambda c: c.execute("DELETE FROM messages WHERE id <= 2"))  # 1-2 free
    feed = run("sessions", "export", "--after-id", "0", "-o", str(tmp_path / "f1.jsonl"))
    assert feed.exit_code == 0, feed.stderr
    assert "Highest message id: 4 (next run: --after-id 4)" in feed.stderr
    # An export from elsewhere whose ids are free here but below the feed's mark.
    other = _record("x", 500.0, n=2)
    for i, msg in enumerate(other["messages"], 1):
        msg["id"] = i
    (tmp_path / "x.jsonl").write_text(json.dumps(other) + "\n", encoding="utf-8")
    assert run("sessions", "import", str(tmp_path / "x.jsonl")).exit_code == 0
    with open_store(default_db_path(), read_only=True) as store:
        assert [m["id"] for m in messages.get_messages(store, "x")] == [5, 6]
        assert sessions.get_session(store, "x") is not None
    nxt = run("sessions", "export", "--after-id", "4", "-o", "-")
    assert nxt.exit_code == 0, nxt.stderr
    records = [json.loads(line) for line in nxt.stdout.splitlines()]
    assert [(r["id"], [m["content"] for m in r["messages"]]) for r in records] == [
        ("x", ["x 0", "x 1"])
    ]


def test_a_feed_of_nothing_new_keeps_the_mark(hermes_home: Path) -> None:
    with open_store(default_db_path()) as store:
        assert portability.import_sessions(store, [_record("a", 1000.0, n=3)]).ok
    done = run("sessions", "export", "--after-id", "3", "-o", "-")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == ""
    assert "Highest message id: 3 (next run: --after-id 3)" in done.stderr
    ahead = run("sessions", "export", "--after-id", "9", "-o", "-")
    assert "Highest message id: 9 (next run: --after-id 9)" in ahead.stderr
