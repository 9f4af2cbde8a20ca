"""Build a small store with a release's own SessionDB, whatever its family (run by that release).

Usage: ``python family_probe.py build DB_PATH`` with HERMES_HOME set to the store's home. Prints
one JSON line. Unlike ``probe.py build`` it calls only what every release since 0.13 has
(create_session, append_message, set_session_title, end_session, update_token_counts), passing
only the keyword arguments the release's signature takes, so one builder serves all eleven
layouts. The store has a few dozen sessions: tool output carrying a fragment no other row has
(the agent's substring index leaves tool rows out from schema 25), cron and subagent sessions
(left out from 0.21.3), CJK text, system prompts, titles, token counts and ended sessions
200 days old.

This file runs under the release's interpreter: it must not import anything from this repository.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

DAY = 86400.0
OLD_DAYS = 200
FRAGMENT = "qxzfragment"  # only in tool output (and one cron transcript)
CJK = "会議の議事録"


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call fn with the keyword arguments its signature takes."""
    params = inspect.signature(fn).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def _tool_call(call_id: str, name: str) -> list[dict]:
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"cmd": "ls"})},
        }
    ]


def build(path: str) -> dict:
    """Write the store described in the module docstring."""
    from hermes_state import SessionDB

    db = SessionDB(db_path=Path(path))
    sources = ("cli", "telegram", "discord", "cron", "subagent")
    made = []
    for i in range(30):
        sid = f"s{i:03d}"
        source = sources[i % len(sources)]
        extra: dict[str, Any] = {
            "model": "openai/gpt-4.1",
            "system_prompt": f"You are Hermes, profile {i % 3}.",
        }
        if source == "subagent":
            extra["parent_session_id"] = "s000"
            extra["model_config"] = {"_delegate_from": "s000"}
        _call(db.create_session, sid, source, **extra)
        db.append_message(sid, "user", f"session {i} question about the deploy pipeline")
        _call(
            db.append_message,
            sid,
            "assistant",
            "Let me run a command.",
            tool_calls=_tool_call(f"c{i}", "terminal"),
        )
        _call(
            db.append_message,
            sid,
            "tool",
            f"output line {i}: {FRAGMENT}-{i} ready",
            tool_name="terminal",
            tool_call_id=f"c{i}",
        )
        text = f"{CJK}を確認しました ({i})" if i % 3 == 0 else f"Done with step {i}; all green."
        db.append_message(sid, "assistant", text)
        if source == "cron":
            db.append_message(sid, "assistant", f"cron digest mentions {FRAGMENT} too")
        if i % 4 == 0:
            _call(db.set_session_title, sid, f"Deploy notes {i}")
        _call(
            db.update_token_counts,
            sid,
            input_tokens=100 + i,
            output_tokens=20 + i,
            model="openai/gpt-4.1",
        )
        if i % 2 == 0:
            db.end_session(sid, "user_exit")
        made.append(sid)
    db.close()
    conn = sqlite3.connect(path)
    try:
        with conn:
            shift = OLD_DAYS * DAY
            old = made[20:26]
            marks = ",".join("?" * len(old))
            conn.execute(
                f"UPDATE sessions SET started_at = started_at - ?, "
                f"ended_at = COALESCE(ended_at, started_at) - ? WHERE id IN ({marks})",
                (shift, shift, *old),
            )
            conn.execute(
                f"UPDATE messages SET timestamp = timestamp - ? WHERE session_id IN ({marks})",
                (shift, *old),
            )
    finally:
        conn.close()
    return {"ok": True, "sessions": len(made)}


def main() -> None:
    command, path, *_rest = sys.argv[1:]
    if command != "build":
        raise SystemExit(f"unknown command {command}")
    out = build(path)
    sys.stdout.write("\n" + json.dumps(out, ensure_ascii=False, default=str) + "\n")


if __name__ == "__main__":
    main()
