"""Drive a real Hermes Agent release's own SessionDB (run by that release's interpreter).

Usage: ``python probe.py COMMAND DB_PATH [ARG]`` with HERMES_HOME set to the store's home.
Prints one JSON line. Commands:

- ``build``: write a realistic store through the release's API — several sources, titles and a
  numbered lineage, tool calls and results, reasoning, CJK text, an in-place compaction and a
  compression chain, usage, old ended sessions (prune candidates), and what plugins do by raw SQL
  (a table of their own, extra columns on sessions and messages).
- ``exercise TAG``: open the store as the agent does and use it: append to a new and an existing
  session, search (words, a substring, CJK), rename, delete, then run PRAGMA integrity_check and
  FTS5 'integrity-check' on every FTS5 table. Each step is reported separately, never raised.
- ``open``: open and close the store once (what any start of the agent does to it).
- ``read DB MODE IDS QUERIES``: open the store at DB (``ro``: the release's own read-only
  SessionDB; ``rw``: its ordinary open) and return what it reads of the sessions IDS (comma-
  separated: the session row and every message, inactive ones included) and which sessions its
  search finds for each of QUERIES (comma-separated).
- ``integrity [DB]``: PRAGMA integrity_check and FTS5 'integrity-check' (of DB if given).
- ``resume SID N``: what a gateway does when a chat it knows comes back: ``create_session`` with
  that id, then N ``append_message`` calls; returns the new message ids.
- ``write ACK STOP SECONDS RATE WRITER``: be a live agent: create sessions, append messages at
  about RATE a second, count tokens, end sessions, until the file STOP exists or SECONDS pass;
  one JSON line per write call to ACK (an append's line only once the call returned).

This file runs under the release's interpreter, never under this package's: it must not import
anything from this repository.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

DAY = 86400.0
OLD_DAYS = 200

# Sessions every build creates (the tests refer to them by these ids).
VICTIMS = ("s_victim_1", "s_victim_2", "s_victim_3")
OLD = ("s_old_1", "s_old_2", "s_old_3")


def _db(path: str):
    from hermes_state import SessionDB

    return SessionDB(db_path=Path(path))


def _tool_call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def build(path: str) -> dict:
    """Write the realistic store described in the module docstring."""
    db = _db(path)
    db.create_session(
        "s_cli_docker",
        "cli",
        model="anthropic/claude-sonnet-4.6",
        system_prompt="You are Hermes, a careful assistant.",
        user_id="local",
    )
    db.append_message(
        "s_cli_docker", "user", "How do I fix the docker build for the kubernetes deploy?"
    )
    db.append_message(
        "s_cli_docker",
        "assistant",
        "Let me look at the build log.",
        tool_calls=[_tool_call("call_1", "terminal", {"cmd": "docker build ."})],
        reasoning="The user wants the Dockerfile fixed; check the log first.",
    )
    db.append_message(
        "s_cli_docker",
        "tool",
        "Step 1/5 : FROM python:3.11\nERROR: failed to solve: dockerfile parse error",
        tool_name="terminal",
        tool_call_id="call_1",
    )
    db.append_message(
        "s_cli_docker",
        "assistant",
        "Pin the base image and fix the COPY line.",
        finish_reason="stop",
    )
    db.set_session_title("s_cli_docker", "Fix Docker build")
    db.update_token_counts(
        "s_cli_docker",
        input_tokens=1200,
        output_tokens=340,
        model="anthropic/claude-sonnet-4.6",
        estimated_cost_usd=0.0123,
    )
    db.end_session("s_cli_docker", "user_exit")

    db.create_session("s_cli_docker2", "cli", model="anthropic/claude-sonnet-4.6")
    db.append_message("s_cli_docker2", "user", "The docker build fails again on arm64")
    db.append_message("s_cli_docker2", "assistant", "Use buildx with --platform linux/arm64.")
    db.set_session_title("s_cli_docker2", "Fix Docker build #2")

    db.create_session(
        "s_tg_tokyo", "telegram", model="openai/gpt-4.1", user_id="tg:42", chat_id="12345"
    )
    db.append_message("s_tg_tokyo", "user", "東京の会議は何時からですか？")
    db.append_message("s_tg_tokyo", "assistant", "会議は午後3時から渋谷のオフィスです。")
    db.append_message("s_tg_tokyo", "user", "ありがとう、資料を準備します")
    db.set_session_title("s_tg_tokyo", "東京の会議")
    db.update_token_counts("s_tg_tokyo", input_tokens=300, output_tokens=90, model="openai/gpt-4.1")

    db.create_session("s_cron_digest", "cron", model="openai/gpt-4.1-mini")
    db.append_message("s_cron_digest", "user", "Nightly digest: is the kubernetes cluster healthy?")
    db.append_message(
        "s_cron_digest",
        "assistant",
        "",
        tool_calls=[_tool_call("call_k", "kubectl", {"args": "get nodes"})],
    )
    db.append_message(
        "s_cron_digest",
        "tool",
        "node-1 Ready\nnode-2 Ready",
        tool_name="kubectl",
        tool_call_id="call_k",
    )
    db.append_message("s_cron_digest", "assistant", "Digest: cluster healthy, 2 nodes ready.")

    db.create_session(
        "s_subagent",
        "subagent",
        model="openai/gpt-4.1-mini",
        parent_session_id="s_cli_docker",
        model_config={"_delegate_from": "s_cli_docker"},
    )
    db.append_message("s_subagent", "user", "Summarise the dockerfile parse error")
    db.append_message("s_subagent", "assistant", "The COPY instruction has a stray quote.")

    db.create_session("s_chain_root", "discord", model="anthropic/claude-sonnet-4.6")
    for i in range(4):
        db.append_message("s_chain_root", "user", f"Deploy checklist item {i}: grafana dashboards")
        db.append_message(
            "s_chain_root", "assistant", f"Item {i} done; the grafana alert is green."
        )
    db.archive_and_compact(
        "s_chain_root",
        [
            {"role": "user", "content": "[summary] checklist items 0-3 covered grafana dashboards"},
            {"role": "assistant", "content": "Continuing the deploy checklist."},
        ],
    )
    db.end_session("s_chain_root", "compression")
    db.create_session(
        "s_chain_child",
        "discord",
        model="anthropic/claude-sonnet-4.6",
        parent_session_id="s_chain_root",
    )
    db.append_message("s_chain_child", "user", "Next: rotate the grafana API keys")
    db.append_message("s_chain_child", "assistant", "Rotated; the old keys are revoked.")
    db.set_session_title("s_chain_child", "Deploy checklist")

    for sid in VICTIMS:
        db.create_session(sid, "cli", model="openai/gpt-4.1")
        db.append_message(sid, "user", f"platypus question from {sid}")
        db.append_message(sid, "assistant", f"platypus answer for {sid}")

    for sid in OLD:
        db.create_session(sid, "telegram", model="openai/gpt-4.1-mini")
        db.append_message(sid, "user", f"an old wombat conversation {sid}")
        db.append_message(sid, "assistant", "wombats are marsupials")
        db.end_session(sid, "user_exit")
    db.close()

    # What plugins and time do to a store, by raw SQL.
    conn = sqlite3.connect(path)
    try:
        with conn:
            shift = OLD_DAYS * DAY
            marks = ",".join("?" * len(OLD))
            conn.execute(
                f"UPDATE sessions SET started_at = started_at - ?, ended_at = ended_at - ? "
                f"WHERE id IN ({marks})",
                (shift, shift, *OLD),
            )
            cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
            if "last_activity_at" in cols:
                conn.execute(
                    f"UPDATE sessions SET last_activity_at = last_activity_at - ? "
                    f"WHERE id IN ({marks}) AND last_activity_at IS NOT NULL",
                    (shift, *OLD),
                )
            conn.execute(
                f"UPDATE messages SET timestamp = timestamp - ? WHERE session_id IN ({marks})",
                (shift, *OLD),
            )
            conn.execute(
                "CREATE TABLE plugin_notes (note_id INTEGER PRIMARY KEY, session_id TEXT, "
                "body TEXT, created REAL)"
            )
            conn.executemany(
                "INSERT INTO plugin_notes (session_id, body, created) VALUES (?, ?, ?)",
                [
                    ("s_cli_docker", "remember the arm64 runner", time.time()),
                    ("s_tg_tokyo", "会議メモ", time.time()),
                ],
            )
            conn.execute("ALTER TABLE sessions ADD COLUMN plugin_flag TEXT")
            conn.execute("ALTER TABLE messages ADD COLUMN plugin_score REAL")
            conn.execute("UPDATE sessions SET plugin_flag = 'starred' WHERE id = 's_cli_docker'")
            conn.execute("UPDATE messages SET plugin_score = 0.75 WHERE session_id = 's_tg_tokyo'")
    finally:
        conn.close()
    return {"ok": True}


def _hit_sessions(hits) -> list[str]:
    return sorted({h["session_id"] for h in hits})


def _fts5_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        name
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        if sql and "USING FTS5" in sql.upper().replace(" ", " ")
    ]


def integrity(path: str) -> dict:
    """PRAGMA integrity_check and FTS5 'integrity-check' of every FTS5 table."""
    conn = sqlite3.connect(path)
    try:
        out = {"integrity_check": [r[0] for r in conn.execute("PRAGMA integrity_check")]}
        fts = {}
        for table in _fts5_tables(conn):
            try:
                conn.execute(f'INSERT INTO "{table}"("{table}") VALUES (\'integrity-check\')')
                fts[table] = "ok"
            except sqlite3.Error as exc:
                fts[table] = f"{type(exc).__name__}: {exc}"
        conn.rollback()
        out["fts"] = fts
        return out
    finally:
        conn.close()


def exercise(path: str, tag: str) -> dict:
    """Use the store as the agent does; report every step separately."""
    steps: dict[str, dict] = {}

    def step(name, fn):
        try:
            steps[name] = {"ok": True, "value": fn()}
        except Exception as exc:  # every failure is data for the test
            steps[name] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc()[-1500:],
            }

    db = None

    def open_db():
        nonlocal db
        db = _db(path)
        return True

    step("open", open_db)
    if db is None:
        return {"steps": steps}
    new_sid = f"r_{tag}"

    def append_new():
        db.create_session(new_sid, "cli", model="probe-model")
        a = db.append_message(new_sid, "user", f"zebrafish habitat question {tag} 会議室の予約")
        b = db.append_message(new_sid, "assistant", "Zebrafish like warm water; see quokka notes.")
        return [a, b]

    def append_existing():
        existing = [s for s in ("s_tg_tokyo", "s_cli_docker2") if db.get_session(s)]
        if not existing:
            return None
        return db.append_message(existing[0], "user", "a follow-up about the narwhal migration")

    step("append_new", append_new)
    step("append_existing", append_existing)
    step("search_new_word", lambda: _hit_sessions(db.search_messages("zebrafish")))
    step("search_new_word2", lambda: _hit_sessions(db.search_messages("narwhal")))
    step("search_old_word", lambda: _hit_sessions(db.search_messages("kubernetes")))
    step("search_substring", lambda: _hit_sessions(db.search_messages("ubernete")))
    step("search_cjk", lambda: _hit_sessions(db.search_messages("会議")))
    step("search_cjk_new", lambda: _hit_sessions(db.search_messages("予約")))

    def rename():
        target = next(s for s in ("s_cli_docker2", "s_chain_child", new_sid) if db.get_session(s))
        title = f"Renamed by {tag}"
        db.set_session_title(target, title)
        return db.get_session(target)["title"] == title

    def delete():
        target = next((s for s in VICTIMS if db.get_session(s)), None)
        if target is None:
            return None
        db.delete_session(target)
        return db.get_session(target) is None

    step("rename", rename)
    step("delete", delete)
    step("close", lambda: db.close())
    step("integrity", lambda: integrity(path))
    return {"steps": steps}


def resume(path: str, sid: str, n: str) -> dict:
    """Resume a chat by id as a gateway does: create_session (a no-op for a known id), append."""
    db = _db(path)
    try:
        db.create_session(sid, "telegram")
        ids = [
            db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"resumed axolotl {i}")
            for i in range(int(n))
        ]
    finally:
        db.close()
    return {"ids": ids}


def open_once(path: str) -> dict:
    """Open and close the store (one start of the agent)."""
    db = _db(path)
    db.close()
    return {"ok": True}


def read(db_path: str, mode: str, ids: str, queries: str) -> dict:
    """Read sessions and search through the release's SessionDB on the store at db_path."""
    import inspect

    from hermes_state import SessionDB

    db = SessionDB(db_path=Path(db_path), read_only=mode == "ro")
    try:
        params = inspect.signature(db.get_messages).parameters
        every = {"include_inactive": True}
        if "include_compacted" in params:
            every["include_compacted"] = True
        sessions = {sid: db.get_session(sid) for sid in ids.split(",") if sid}
        messages = {sid: db.get_messages(sid, **every) for sid in sessions}
        found = {q: _hit_sessions(db.search_messages(q)) for q in queries.split(",") if q}
        fts = bool(getattr(db, "_fts_enabled", True))
    finally:
        db.close()
    return {"sessions": sessions, "messages": messages, "search": found, "fts_enabled": fts}


def signatures(names: str) -> dict:
    """Describe the parameters of the named SessionDB methods (name, kind, default)."""
    import inspect

    from hermes_state import SessionDB

    out = {}
    for name in names.split(","):
        fn = getattr(SessionDB, name, None)
        if fn is None:
            out[name] = None
            continue
        params = list(inspect.signature(fn).parameters.values())[1:]  # without self
        out[name] = [
            [
                p.name,
                p.kind.name,
                None if p.default is inspect.Parameter.empty else repr(p.default),
            ]
            for p in params
        ]
    return out


# --- a live agent (``write``) ---------------------------------------------------------------------

_WORDS = [
    *("deploy", "kubernetes", "grafana", "docker", "arm64", "runner", "cache", "latency"),
    *("gateway", "telegram", "discord", "cron", "digest", "alert", "rollout", "canary"),
    *("migration", "backup", "restore", "vacuum", "journal", "index", "search", "platypus"),
    *("wombat", "quokka", "narwhal", "zebrafish", "compaction", "lineage", "tokens", "budget"),
    *("invoice", "weather", "tokyo"),
]


def _live_text(session_id: str, n: int, role: str, salt: int) -> str:
    """Return a unique, realistic message text (words, a number, sometimes CJK)."""
    words = " ".join(_WORDS[(salt * 7 + i * 13) % len(_WORDS)] for i in range(12 + salt % 20))
    cjk = " 会議の資料を確認します" if salt % 9 == 0 else ""
    return f"[{session_id} #{n} {role}] {words} ({salt}){cjk}"


class _Live:
    """One live agent: its SessionDB, its ack file and the latency of every write call."""

    def __init__(self, ack: Any, writer: str) -> None:
        self.ack, self.writer = ack, writer
        self.latencies: list[float] = []
        self.ops: dict[str, int] = {}
        self.errors: list[str] = []

    def call(self, op: str, fn: Callable[[], Any], **fields: Any) -> tuple[bool, Any]:
        """Run one write call and log it (after it returned); return (ok, result)."""
        extra = fields.pop("ack", None)  # the ack's fields from the call's result
        t0 = time.perf_counter()
        try:
            result = fn()
        except Exception as exc:  # an agent error is data for the test, never fatal
            took = time.perf_counter() - t0
            self.latencies.append(took)
            self.errors.append(f"{op}: {exc!r}")
            self._log({"op": op, "error": repr(exc), "t": took, "at": time.time(), **fields})
            return False, None
        took = time.perf_counter() - t0
        if op not in ("open", "close"):  # the latency of writes, not of start-up
            self.latencies.append(took)
        self.ops[op] = self.ops.get(op, 0) + 1
        line = {"op": op, **fields, "t": took, "at": time.time()}
        if extra is not None:
            line.update(extra(result))
        self._log(line)
        return True, result

    def _log(self, line: dict) -> None:
        self.ack.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.ack.flush()

    def run(self, path: str, stop: Path, deadline: float, per_s: float) -> str:
        """Write sessions until STOP exists or the deadline; return what stopped it."""
        import hashlib
        import os

        ok, db = self.call("open", lambda: _db(path))
        if not ok:
            return "open_failed"
        interval, due, salt, sessions = 1.0 / per_s, time.time(), 0, 0
        stopped_by = "max_seconds"
        while True:
            if stop.exists():
                stopped_by = "stop_file"
                break
            if time.time() >= deadline:
                break
            sid = f"live_{self.writer}_{os.getpid()}_{sessions:05d}"
            sessions += 1
            made, _ = self.call(
                "create",
                lambda sid=sid: db.create_session(sid, "telegram", model="live/model"),
                s=sid,
            )
            if not made:
                continue
            for n in range((2 + sessions % 3) * 4):  # 2 to 4 turns of four messages, then end
                now = time.time()
                if stop.exists() or now >= deadline:
                    break
                due = max(due + interval, now - 1.0)  # keep the pace; never burst over 1 s
                if due > now:
                    time.sleep(min(due - now, 1.0))
                salt += 1
                step = n % 4
                role = ("user", "assistant", "tool", "assistant")[step]
                text = _live_text(sid, n, role, salt)
                call_id = f"call_{sid}_{n - step}"
                kwargs: dict = {}
                if step == 1:
                    kwargs["tool_calls"] = [_tool_call(call_id, "terminal", {"cmd": f"ls {salt}"})]
                elif step == 2:
                    kwargs.update(tool_name="terminal", tool_call_id=call_id)
                elif step == 3:
                    kwargs["finish_reason"] = "stop"
                digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
                self.call(
                    "append",
                    lambda sid=sid, role=role, text=text, kwargs=kwargs: db.append_message(
                        sid, role, text, **kwargs
                    ),
                    s=sid,
                    ack=lambda msg_id, digest=digest: {"id": msg_id, "h": digest},
                )
                if step == 3 and hasattr(db, "update_token_counts"):
                    self.call(
                        "tokens",
                        lambda sid=sid, salt=salt: db.update_token_counts(
                            sid, input_tokens=100 + salt % 50, output_tokens=20 + salt % 7
                        ),
                        s=sid,
                    )
            self.call("end", lambda sid=sid: db.end_session(sid, "user_exit"), s=sid)
        self.call("close", db.close)
        return stopped_by


def write(path: str, ack_path: str, stop_path: str, seconds: str, rate: str, writer: str) -> dict:
    """Act as a live agent on the store until STOP exists or SECONDS pass; ack every write."""
    started = time.time()
    with open(ack_path, "a", encoding="utf-8") as ack:  # the harness's file, not a store file
        live = _Live(ack, writer)
        stopped_by = live.run(
            path, Path(stop_path), started + float(seconds), max(float(rate), 0.1)
        )
    ordered = sorted(live.latencies)
    p99 = ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] if ordered else 0.0
    return {
        "writer": writer,
        "messages": live.ops.get("append", 0),
        "sessions": live.ops.get("create", 0),
        "ops": live.ops,
        "errors": len(live.errors),
        "error_samples": live.errors[:5],
        "max_latency_s": ordered[-1] if ordered else 0.0,
        "p99_latency_s": p99,
        "elapsed_s": time.time() - started,
        "stopped_by": stopped_by,
    }


def main() -> None:
    command, path, *rest = sys.argv[1:]
    if command == "build":
        out = build(path)
    elif command == "exercise":
        out = exercise(path, rest[0] if rest else "x")
    elif command == "open":
        out = open_once(path)
    elif command == "resume":
        out = resume(path, *rest)
    elif command == "integrity":
        out = integrity(rest[0] if rest else path)
    elif command == "read":
        out = read(*rest)
    elif command == "signatures":
        out = signatures(rest[0])
    elif command == "write":
        out = write(path, *rest)
    else:
        raise SystemExit(f"unknown command {command}")
    sys.stdout.write("\n" + json.dumps(out, ensure_ascii=False, default=str) + "\n")


if __name__ == "__main__":
    main()
