"""Export and import (hermes_state.transfer.export, .portability): streaming writers and an
exact round trip."""

from __future__ import annotations

import io
import json
import os
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import SAMPLE, load_sample, sample_records

from hermes_state.records import messages, sessions
from hermes_state.store.connection import Store, open_store
from hermes_state.transfer import export, import_records, portability


@pytest.fixture
def store(hermes_home: Path) -> Iterator[Store]:
    """A writable store in the test's home."""
    with open_store(hermes_home / "state.db") as s:
        yield s


@pytest.fixture
def other(tmp_path: Path) -> Iterator[Store]:
    """A second, empty writable store."""
    with open_store(tmp_path / "other" / "state.db") as s:
        yield s


def _record(sid: str = "s1", **overrides: Any) -> dict[str, Any]:
    base = {
        "id": sid,
        "source": "cli",
        "started_at": 1_700_000_000.5,
        "title": None,
        "messages": [
            {"role": "user", "content": "hello", "timestamp": 1_700_000_001.25},
            {"role": "assistant", "content": "hi", "timestamp": 1_700_000_002.0},
        ],
    }
    base.update(overrides)
    return base


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


def _snapshot(store: Store) -> list[dict[str, Any]]:
    """Every session with all its messages, minus message row ids (assigned by the store)."""
    out = []
    for record in export.export_all(store):
        msgs = [{k: v for k, v in m.items() if k != "id"} for m in record["messages"]]
        out.append({**record, "messages": msgs})
    return out


# --- export ---------------------------------------------------------------------------------


def test_export_session_includes_inactive_and_compacted_rows_with_flags(store: Store) -> None:
    load_sample(store.path)
    record = export.export_session(store, "20261122_101500_e11b20")
    flags = [(m["active"], m["compacted"]) for m in record["messages"]]
    assert flags == [(0, 1)] * 4 + [(1, 0)] * 2
    assert "session_id" not in record["messages"][0]


def test_export_all_yields_sessions_oldest_first(store: Store) -> None:
    load_sample(store.path)
    ids = [r["id"] for r in export.export_all(store)]
    assert ids == [r["id"] for r in sample_records()]


def test_export_all_filters_by_source_and_start_time(store: Store) -> None:
    load_sample(store.path)
    cron = [r["id"] for r in export.export_all(store, source="cron")]
    assert cron == ["20261121_060000_d90a11", "20261129_030000_2c3d4e"]
    cutoff = sessions.get_session(store, "20261126_140501_0a7c55")["started_at"]
    newer = [r["id"] for r in export.export_all(store, started_after=cutoff)]
    older = [r["id"] for r in export.export_all(store, started_before=cutoff)]
    assert newer[0] == "20261126_140501_0a7c55" and len(newer) + len(older) == 12


def test_export_all_takes_several_sources_and_excluded_sources(store: Store) -> None:
    load_sample(store.path)
    both = {r["source"] for r in export.export_all(store, sources=["cron", "discord"])}
    assert both == {"cron", "discord"}
    rest = [r["source"] for r in export.export_all(store, exclude_sources=["cli", "cron"])]
    assert set(rest) == {"telegram", "discord"} and len(rest) == 5
    chosen = export.export_all(
        store,
        session_ids=["20261121_060000_d90a11", "20261118_091502_a1c9e2"],
        exclude_sources=["cron"],
    )
    assert [r["id"] for r in chosen] == ["20261118_091502_a1c9e2"]


def test_export_all_by_session_ids_keeps_the_given_order(store: Store) -> None:
    load_sample(store.path)
    wanted = ["20261130_091233_3d4e5f", "20261118_091502_a1c9e2"]
    assert [r["id"] for r in export.export_all(store, session_ids=wanted)] == wanted


def test_export_all_messages_are_lazy(store: Store) -> None:
    load_sample(store.path)
    record = next(export.export_all(store))
    assert not isinstance(record["messages"], list)


def test_exporting_a_large_session_keeps_memory_flat(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions.create_session(store, "big", "cli")
    body = "x" * 400
    messages.append_messages(
        store, "big", [{"role": "user", "content": f"{i} {body}"} for i in range(10_000)]
    )
    monkeypatch.setattr(export, "MESSAGE_CHUNK", 200)

    class Sink(io.TextIOBase):
        """Counts what is written and keeps none of it."""

        written = 0

        def write(self, text: str) -> int:
            self.written += len(text)
            return len(text)

    sink = Sink()
    tracemalloc.start()
    try:
        counts = export.write_jsonl(export.export_all(store), sink)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counts.messages == 10_000 and sink.written > 10_000 * 400
    # The session is ~4 MB of text; streaming holds one 200-message chunk (~0.5 MB) at a time.
    assert peak < 1.5 * 1024 * 1024


def test_write_json_is_one_valid_array(store: Store) -> None:
    load_sample(store.path)
    out = io.StringIO()
    counts = export.write_json(export.export_all(store), out)
    data = json.loads(out.getvalue())
    assert counts.sessions == len(data) == 12
    assert sum(len(r["messages"]) for r in data) == counts.messages == 53


def test_write_json_of_nothing_is_an_empty_array() -> None:
    out = io.StringIO()
    export.write_json(iter(()), out)
    assert json.loads(out.getvalue()) == []


def test_write_markdown_shows_titles_roles_and_tool_calls(store: Store) -> None:
    load_sample(store.path)
    out = io.StringIO()
    export.write_markdown(export.export_all(store, session_ids=["20261119_073011_b7d401"]), out)
    text = out.getvalue()
    assert "## 東京の会議の予定" in text
    assert "### User — 2026-11-19T07:30:31Z" in text
    assert '"name": "calendar.update"' in text


def test_export_to_path_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("keep me", encoding="utf-8")
    with pytest.raises(export.ExportTargetError, match="Refusing to overwrite"):
        export.export_to_path(iter(()), target)
    assert target.read_text(encoding="utf-8") == "keep me"


def test_export_to_path_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(export.ExportTargetError, match="is a directory"):
        export.export_to_path(iter(()), tmp_path)


def test_export_to_path_leaves_no_temp_file_when_the_writer_fails(tmp_path: Path) -> None:
    def broken(records: Any, fp: Any, *, progress: Any = None) -> Any:
        fp.write("partial")
        raise RuntimeError("disk on fire")

    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    with pytest.raises(RuntimeError):
        export.export_to_path(iter(()), out_dir / "out.jsonl", broken)
    assert list(out_dir.iterdir()) == []


def test_export_to_path_writes_a_private_file(tmp_path: Path, store: Store) -> None:
    load_sample(store.path)
    target = tmp_path / "out.jsonl"
    export.export_to_path(export.export_all(store), target)
    assert os.stat(target).st_mode & 0o777 == 0o600
    assert len(target.read_text(encoding="utf-8").splitlines()) == 12


# --- import ---------------------------------------------------------------------------------


def test_round_trip_restores_ids_timestamps_uids_flags_and_counters(
    store: Store, other: Store, tmp_path: Path
) -> None:
    load_sample(store.path)
    dump = tmp_path / "dump.jsonl"
    export.export_to_path(export.export_all(store), dump)
    result = portability.import_sessions(other, dump)
    assert (result.imported, result.errors) == (12, [])
    assert _snapshot(other) == _snapshot(store)


def test_round_trip_through_a_json_array_file(store: Store, other: Store, tmp_path: Path) -> None:
    load_sample(store.path)
    dump = tmp_path / "dump.json"
    export.export_to_path(export.export_all(store), dump, export.write_json)
    assert portability.import_sessions(other, dump).imported == 12
    assert _snapshot(other) == _snapshot(store)


@pytest.mark.parametrize("writer", [export.write_jsonl, export.write_json])
def test_round_trip_through_a_pipe_keeps_summary_rows_and_ignores_nothing(
    store: Store, other: Store, writer: Any
) -> None:
    load_sample(store.path)
    store.write(
        lambda conn: conn.execute(
            "UPDATE messages SET _compressed_summary = 1 WHERE id = (SELECT max(id) FROM messages)"
        )
    )
    read_fd, write_fd = os.pipe()

    def produce() -> None:
        with os.fdopen(write_fd, "w", encoding="utf-8") as fp:
            writer(export.export_all(store), fp)

    # A pipe cannot seek: the import peeks at its start and reads on (as from stdin).
    thread = threading.Thread(target=produce)
    thread.start()
    with os.fdopen(read_fd, encoding="utf-8") as fp:
        result = portability.import_sessions(other, fp)
    thread.join()
    assert (result.imported, result.errors, result.warnings) == (12, [], [])
    assert _snapshot(other) == _snapshot(store)
    flagged = other.conn.execute("SELECT count(*) FROM messages WHERE _compressed_summary = 1")
    assert flagged.fetchone()[0] == 1


def test_import_preserves_the_sample_file_exactly(store: Store) -> None:
    load_sample(store.path)
    exported = [json.loads(json.dumps(r)) for r in _snapshot(store)]
    for original, back in zip(sample_records(), exported, strict=True):
        for key, value in original.items():
            if key != "messages":
                assert back[key] == value, key
        for m_in, m_out in zip(original["messages"], back["messages"], strict=True):
            for key, value in m_in.items():
                assert m_out[key] == value, (original["id"], key)


def test_import_reports_a_malformed_line_and_imports_the_rest(store: Store, tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [_record("a"), '{"id": "b", "source": ', _record("c")])
    result = portability.import_sessions(store, path)
    assert result.imported == 2
    assert [(e.line, e.session_id) for e in result.errors] == [(2, None)]
    assert "invalid JSON" in result.errors[0].message
    assert sessions.get_session(store, "b") is None


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (_record(7), "'id' must be a non-empty string"),
        (_record("x", source=None), "'source' must be a non-empty string"),
        (_record("x", started_at="yesterday"), "'started_at' must be a number"),
        (_record("x", messages={"role": "user"}), "'messages' must be a list"),
        (_record("x", messages=[{"content": "no role"}]), "messages[0]: 'role'"),
        (_record("x", messages=["text"]), "messages[0] must be an object"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_import_rejects_records_of_the_wrong_shape(
    store: Store, tmp_path: Path, record: Any, message: str
) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [_record("ok"), record])
    result = portability.import_sessions(store, path)
    assert result.imported == 1
    assert len(result.errors) == 1 and result.errors[0].line == 2
    assert message in result.errors[0].message
    assert sessions.get_session(store, "x") is None


def test_import_writes_nothing_of_a_session_whose_message_is_refused(
    store: Store, tmp_path: Path
) -> None:
    bad = _record("x")
    bad["messages"].append({"role": "user", "display_metadata": 42})
    result = portability.import_sessions(store, _jsonl(tmp_path / "in.jsonl", [bad]))
    assert result.errors and result.errors[0].session_id == "x"
    assert sessions.get_session(store, "x") is None
    assert messages.get_messages(store, "x") == []


def test_import_skips_existing_sessions_by_default(store: Store, tmp_path: Path) -> None:
    portability.import_sessions(store, [_record("s1")])
    result = portability.import_sessions(store, [_record("s1", title="changed")])
    assert (result.imported, result.skipped) == (0, 1)
    assert sessions.get_session(store, "s1")["title"] is None


def test_import_replace_overwrites_the_session_and_its_messages(store: Store) -> None:
    portability.import_sessions(store, [_record("s1")])
    newer = _record("s1", title="changed", messages=[{"role": "user", "content": "only"}])
    result = portability.import_sessions(store, [newer], on_conflict="replace")
    assert result.replaced == 1
    assert sessions.get_session(store, "s1")["title"] == "changed"
    assert [m["content"] for m in messages.get_messages(store, "s1")] == ["only"]


def test_import_links_a_child_that_comes_before_its_parent(store: Store) -> None:
    child = _record("child", parent_session_id="parent")
    result = portability.import_sessions(store, [child, _record("parent")])
    assert result.imported == 2 and not result.warnings
    assert sessions.get_session(store, "child")["parent_session_id"] == "parent"


def test_import_drops_the_link_to_a_parent_not_in_the_store_and_says_so(store: Store) -> None:
    result = portability.import_sessions(store, [_record("orphan", parent_session_id="gone")])
    assert result.imported == 1
    assert sessions.get_session(store, "orphan")["parent_session_id"] is None
    assert any("gone" in w for w in result.warnings)


def test_import_reports_a_title_held_by_another_session(store: Store) -> None:
    portability.import_sessions(store, [_record("a", title="Same")])
    result = portability.import_sessions(store, [_record("b", title="Same")])
    assert result.imported == 0
    assert "already used by session a" in result.errors[0].message


def test_import_refuses_a_markdown_export(store: Store, tmp_path: Path) -> None:
    md = tmp_path / "export.md"
    md.write_text("# Hermes sessions export\n", encoding="utf-8")
    with pytest.raises(import_records.ImportFormatError, match="Markdown"):
        portability.import_sessions(store, md)


def test_import_reports_a_truncated_json_array(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text("[\n" + json.dumps(_record("a")) + ",\n" + json.dumps(_record("b"))[:40])
    result = portability.import_sessions(store, path)
    assert result.imported == 1
    assert result.errors[0].line == 3


def test_import_of_the_sample_file_counts_every_message(store: Store) -> None:
    result = portability.import_sessions(store, SAMPLE)
    assert (result.imported, result.messages) == (12, 53)
