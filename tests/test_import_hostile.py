"""`hermes sessions import` with hostile records: each bad line is reported with its number and
the rest of the file is imported; replace honours the runtime ledger (issue 13.5, 13.7)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hostile_env import hermes

from hermes_state.records import ledger, sessions
from hermes_state.store.connection import open_store


def good(sid: str, text: str = "hello") -> str:
    return json.dumps(
        {
            "id": sid,
            "source": "cli",
            "started_at": 1_700_000_000.0,
            "messages": [{"role": "user", "content": text, "timestamp": 1_700_000_001.0}],
        }
    )


TITLE_LINE = '{"id": "t1", "title": "x\\udfff", "source": "cli", "started_at": 1}'
# Lines as an attacker (or a broken exporter) writes them; JSON escapes make lone surrogates.
BAD_LINES = {
    "deep-nesting": '{"id": "deep", "source": "cli", "started_at": 1, "x": '
    + "[" * 100_000
    + "]" * 100_000
    + "}",
    "surrogate-id": '{"id": "a\\ud800b", "source": "cli", "started_at": 1, "messages": []}',
    "huge-int": '{"id": "big", "source": "cli", "started_at": 1, "input_tokens": '
    + str(2**63)
    + "}",
    "huge-int-in-message": '{"id": "bigm", "source": "cli", "started_at": 1, "messages": '
    '[{"role": "user", "content": "x", "token_count": 99999999999999999999}]}',
}


@pytest.mark.parametrize("kind", list(BAD_LINES))
def test_import_reports_a_bad_line_and_imports_the_rest(
    kind: str, hermes_home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([good("before"), BAD_LINES[kind], good("after")]) + "\n")
    proc = hermes("sessions", "import", str(src), home=hermes_home)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith("Error: line 2"), proc.stderr
    conn = sqlite3.connect(hermes_home / "state.db")
    try:
        ids = {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()
    assert {"before", "after"} <= ids


def test_import_of_a_title_with_a_lone_surrogate_stores_a_replacement_character(
    hermes_home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    # A title is text: the lone surrogate becomes U+FFFD, as in every stored text.
    src.write_text(TITLE_LINE + "\n")
    proc = hermes("sessions", "import", str(src), home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    conn = sqlite3.connect(hermes_home / "state.db")
    try:
        assert conn.execute("SELECT title FROM sessions WHERE id = 't1'").fetchone() == ("x\ufffd",)
    finally:
        conn.close()


def test_json_array_with_a_deeply_nested_element_is_reported(
    hermes_home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "in.json"
    src.write_text("[" + good("first") + ",\n" + BAD_LINES["deep-nesting"] + "]\n")
    proc = hermes("sessions", "import", str(src), home=hermes_home)
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    assert "nested too deeply" in proc.stderr


def test_replace_refuses_a_session_with_a_started_admission_like_delete(
    hermes_home: Path, tmp_path: Path
) -> None:
    db = hermes_home / "state.db"
    with open_store(db) as store:
        for sid in ("busy", "idle"):
            sessions.create_session(store, sid, "cli")
        epoch = ledger.begin_owner_epoch(store, "gw-1")
        admission = ledger.admit(store, "busy", "req-1", {"text": "hi"})
        ledger.start(store, admission.admission_id, epoch)
    src = tmp_path / "in.jsonl"
    src.write_text(good("busy", "replaced") + "\n" + good("idle", "replaced") + "\n")
    deleted = hermes("sessions", "delete", "busy", "--yes", home=hermes_home)
    assert deleted.returncode == 1 and "open runtime work" in deleted.stderr
    proc = hermes("sessions", "import", str(src), "--on-conflict", "replace", home=hermes_home)
    assert proc.returncode == 1
    assert "line 1 (session busy)" in proc.stderr and "open runtime work" in proc.stderr
    assert "replaced 1" in proc.stdout
    conn = sqlite3.connect(db)
    try:
        texts = dict(conn.execute("SELECT session_id, content FROM messages"))
        status = conn.execute("SELECT status FROM session_admissions").fetchone()
    finally:
        conn.close()
    assert texts == {"idle": "replaced"}  # busy kept its (empty) history; idle was replaced
    assert status == ("started",)
