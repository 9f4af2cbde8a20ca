"""Generate a realistic, reproducible benchmark store of N messages through the hermes_state API.

Usage: python bench/generate.py --messages 1000000 [--seed 7] [--out DIR] [--reuse]
       [--single-session] [--size-scale 8.0]
       python bench/generate.py --field-report [--out DIR]   (760,000 messages, 59,350 sessions)

Shape of the data: power-law messages per session (many short cron/chat sessions, a few huge
coding sessions); user/assistant/tool turns with JSON tool calls and tool results; reasoning
fields; ~5 % CJK text; several sources and models; compression lineages (rotation chains with
``parent_session_id`` and ``end_reason='compression'``, and in-place compaction generations
with ``active=0, compacted=1`` archives whose kept rows reappear with the same uid); titles
(``T``, ``T #2`` … along a chain); per-session usage.

How rows get in: sessions through ``sessions.create_session`` / ``end_session`` /
``set_session_title`` / ``record_usage``; messages through ``messages.insert_messages`` inside
``Store.write`` with large batches (the public batch path: FTS triggers and the CJK catch-up run
as for any writer). Compaction and rotation rows are written with the same batch path, passing
the copied uid/flags, instead of ``compression.compact_session`` / ``rotate_session``, because
those mint a fresh uid and wall-clock times for the summary row.

Reproducibility: every value (ids, uids, timestamps, text) comes from one ``random.Random(seed)``,
so the same ``--messages`` and ``--seed`` give a byte-identical ``state.db``. The library stamps
three columns with the wall clock itself (``sessions.ended_at`` in ``end_session``,
``session_model_usage.first_seen/last_seen`` in ``record_usage``); the generator sets them to
seeded times inside the next batch transaction — a fixed-size REAL rewritten in place, so the
final pages are the same as if the library had been given those times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # a script run from a checkout, package not installed
    sys.path.insert(0, str(REPO_ROOT))

from hermes_state.records import messages as hmessages, sessions as hsessions  # noqa: E402
from hermes_state.reports import usage as husage  # noqa: E402
from hermes_state.store.connection import Store, open_store  # noqa: E402

GENERATOR_VERSION = 1
DEFAULT_SEED = 7
META_NAME = "bench-meta.json"
# The data ends here (2026-01-01T00:00:00Z), not at the wall clock, so a seed fixes every byte.
END_TS = 1_767_225_600.0
SPAN_S = 365 * 86400.0
BATCH_MESSAGES = 10_000
# Sessions are int(scale * pareto(1.25)) messages long (2 at least, cron aside). 8 gives the
# coding-heavy default (~33 messages a session); 3.35 gives a profile near the field report's
# (54,647 sessions): 760,000 messages in 59,350 sessions with seed 7 (~13 a session).
DEFAULT_SIZE_SCALE = 8.0
FIELD_REPORT = {"messages": 760_000, "size_scale": 3.35}

# Search terms the benchmark relies on, with the share of rows that carry them.
COMMON_TERM = "checkpoint"  # ~50 % of rows (SPEC §18: a term matching >= 30 % of rows)
COMMON_TERM_SHARE = 0.5
SELECTIVE_TERM = "quetzal"  # ~0.03 % of rows
SELECTIVE_TERM_SHARE = 0.0003
SUBSTRING_QUERY = "etzal"  # only a substring of SELECTIVE_TERM: served by the trigram index
CJK_QUERY = "会議"
CJK_SHARE = 0.05

SOURCES = (
    ("cli", 0.40),
    ("telegram", 0.18),
    ("discord", 0.12),
    ("slack", 0.06),
    ("cron", 0.12),
    ("api_server", 0.07),
    ("whatsapp", 0.05),
)
GATEWAY_SOURCES = frozenset({"telegram", "discord", "slack", "whatsapp"})
MODELS = (
    ("anthropic/claude-sonnet-4", 0.35, 3.0, 15.0),
    ("openai/gpt-5", 0.25, 1.25, 10.0),
    ("nousresearch/hermes-4-405b", 0.15, 1.0, 3.0),
    ("google/gemini-2.5-pro", 0.15, 1.25, 10.0),
    ("qwen/qwen3-coder", 0.10, 0.4, 1.6),
)
END_REASONS = ("user_exit", "session_reset", "idle_timeout", "tui_shutdown", "ws_disconnect")


def _wordlist(text: str) -> tuple[str, ...]:
    """Return the words of a space-separated list."""
    return tuple(text.split())


COMMON_WORDS = _wordlist(
    "the and to of a in is it you that for on with this be are as was have not at or but "
    "can we if so do will my what all there one about just your from up out they would get "
    "like when which some more then time them also now only see how use any these first over "
    "new after work because need want make look here know should could still well back way "
    "file code build test run error fix change update check value line again maybe think "
    "problem output config server service user message session model tool call result data "
    "path function class module import return list string number field table query index "
    "script command branch commit merge release version install package deploy log debug "
    "issue request response status cache memory thread process retry timeout token limit "
    "please thanks sure looks good done next step works fine great try instead actually"
)
DEV_WORDS = _wordlist(
    "docker chat-send kubectl pytest ruff mypy nginx redis postgres sqlite systemd gateway "
    "telegram discord webhook cron backup restore migrate schema vector embedding prompt "
    "context compression rollback snapshot worker queue scheduler container image volume "
    "dockerfile makefile yaml json toml env api endpoint latency throughput benchmark"
)
PATHS = (
    "src/hermes/gateway/telegram.py",
    "src/hermes/agent/loop.py",
    "hermes_cli/main.py",
    "tools/terminal_tool.py",
    "~/.hermes/config.yaml",
    "~/.hermes/logs/gateway.log",
    "docker-compose.yml",
    "Dockerfile",
    "tests/test_gateway.py",
    "web/src/components/ChatView.tsx",
    "scripts/deploy.sh",
    "README.md",
    "pyproject.toml",
    "/etc/nginx/sites-enabled/hermes.conf",
)
COMMANDS = (
    "docker compose up -d --build",
    "docker logs hermes-gateway --tail 200",
    "git status --short",
    "git rebase -i HEAD~3",
    "pytest -q tests/test_gateway.py",
    "ruff check . --fix",
    "systemctl restart hermes-gateway",
    "npm run build",
    "journalctl -u hermes --since today",
    "hermes sessions search chat-send",
    "sqlite3 ~/.hermes/state.db 'PRAGMA integrity_check'",
    "kubectl get pods -n agents",
    "curl -s http://localhost:8642/health",
)
COMMON_PHRASES = (
    "save a checkpoint before the refactor",
    "the last checkpoint is from this morning",
    "restore from checkpoint if the migration fails",
    "checkpoint written",
    "roll back to the previous checkpoint",
    "create a checkpoint and continue",
)
TOOLS = (
    "terminal",
    "read_file",
    "write_file",
    "search_files",
    "patch",
    "web_search",
    "browser_navigate",
    "send_message",
    "execute_code",
    "todo",
)
CJK_WORDS = (
    "東京",
    "会議",
    "数据",
    "明日",
    "予定",
    "設定",
    "サーバー",
    "データベース",
    "ファイル",
    "エラー",
    "確認",
    "修正",
    "天気",
    "大阪",
    "项目",
    "部署",
    "错误",
    "日志",
    "检查点",
    "备份",
    "用户",
    "服务器",
    "配置",
    "テスト",
    "ログ",
    "资料",
    "報告",
    "資料",
    "北京",
    "上海",
)
CJK_GLUE = ("の", "は", "を", "で", "に", "が", "と", "的", "了", "在", "和", "、")
CJK_ENDS = ("。", "ですか？", "してください。", "吗？", "。", "了。", "します。")
TITLE_VERBS = (
    "Fix",
    "Debug",
    "Refactor",
    "Plan",
    "Review",
    "Deploy",
    "Migrate",
    "Explain",
    "Write",
    "Tune",
    "Investigate",
    "Set up",
)
TITLE_OBJECTS = (
    "Docker build",
    "telegram gateway",
    "cron backup job",
    "search index",
    "nginx config",
    "release notes",
    "CI pipeline",
    "memory leak",
    "API rate limits",
    "postgres migration",
    "Discord bot",
    "prompt cache",
    "weekly report",
    "trip to Tokyo",
    "k8s deployment",
    "unit tests",
)


@dataclass(frozen=True)
class GenerationResult:
    """What one generation produced."""

    path: str
    messages: int
    sessions: int
    seed: int
    single_session: bool
    seconds: float
    db_bytes: int
    sha256: str
    schema: str = ""  # fingerprint of the DDL (tables, indexes, FTS layout, triggers)
    generator_version: int = GENERATOR_VERSION
    size_scale: float = DEFAULT_SIZE_SCALE

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON-ready data."""
        return asdict(self)


@dataclass
class _Pending:
    """Messages and seeded clock fix-ups waiting for the next batch transaction."""

    batches: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    ended_at: list[tuple[float, str]] = field(default_factory=list)
    usage_seen: list[tuple[float, float, str]] = field(default_factory=list)
    count: int = 0


class Writer:
    """Sends generated sessions and messages to the store, messages in large transactions."""

    def __init__(self, store: Store, batch_messages: int = BATCH_MESSAGES) -> None:
        self.store = store
        self.batch_messages = batch_messages
        self.pending = _Pending()
        self.sessions = 0
        self.messages = 0

    def create(self, session_id: str, source: str, started_at: float, **columns: Any) -> None:
        """Create a session row."""
        hsessions.create_session(self.store, session_id, source, started_at=started_at, **columns)
        self.sessions += 1

    def add_messages(self, session_id: str, msgs: list[dict[str, Any]]) -> None:
        """Queue a session's messages (flushed in batches)."""
        if not msgs:
            return
        self.pending.batches.append((session_id, msgs))
        self.pending.count += len(msgs)
        self.messages += len(msgs)
        if self.pending.count >= self.batch_messages:
            self.flush()

    def end(self, session_id: str, reason: str, ended_at: float) -> None:
        """End a session at a seeded time."""
        hsessions.end_session(self.store, session_id, reason)
        self.pending.ended_at.append((ended_at, session_id))

    def title(self, session_id: str, title: str) -> None:
        """Set a session title."""
        hsessions.set_session_title(self.store, session_id, title, source="auto")

    def usage(self, session_id: str, model: str, seen: tuple[float, float], **usage: Any) -> None:
        """Record a session's usage with seeded first/last-seen times."""
        husage.record_usage(self.store, session_id, model, **usage)
        self.pending.usage_seen.append((seen[0], seen[1], session_id))

    def flush(self) -> None:
        """Write every queued message and clock fix-up in one transaction."""
        pending = self.pending
        if not (pending.batches or pending.ended_at or pending.usage_seen):
            return

        def fn(conn: sqlite3.Connection) -> None:
            for session_id, msgs in pending.batches:
                hmessages.insert_messages(conn, session_id, msgs)
            conn.executemany("UPDATE sessions SET ended_at = ? WHERE id = ?", pending.ended_at)
            conn.executemany(
                "UPDATE session_model_usage SET first_seen = ?, last_seen = ? WHERE session_id = ?",
                pending.usage_seen,
            )

        self.store.write(fn)
        self.pending = _Pending()


class TextMaker:
    """Seeded text: English prose, code-ish tokens, JSON tool traffic and CJK sentences."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def words(self, n: int) -> str:
        """Return n words of prose with some code-ish tokens."""
        rng = self.rng
        picked = rng.choices(COMMON_WORDS, k=n)
        for _ in range(max(1, n // 12)):
            i = rng.randrange(len(picked))
            r = rng.random()
            if r < 0.55:
                picked[i] = rng.choice(DEV_WORDS)
            elif r < 0.8:
                picked[i] = rng.choice(PATHS)
            else:
                picked[i] = f"`{rng.choice(COMMANDS)}`"
        text = " ".join(picked)
        return text[:1].upper() + text[1:] + "."

    def prose(self, mean_words: float, *, cap: int = 600) -> str:
        """Return prose whose length is lognormal around mean_words."""
        n = min(cap, max(2, int(self.rng.lognormvariate(math.log(mean_words), 0.7))))
        parts = []
        while n > 0:
            k = min(n, self.rng.randint(6, 18))
            parts.append(self.words(k))
            n -= k
        return " ".join(parts)

    def cjk(self, mean_words: float) -> str:
        """Return Japanese/Chinese sentences built from common CJK words."""
        rng = self.rng
        n = max(3, int(rng.lognormvariate(math.log(mean_words), 0.6)))
        out = []
        for i in range(n):
            out.append(rng.choice(CJK_WORDS))
            out.append(rng.choice(CJK_GLUE) if i % 5 != 4 else rng.choice(CJK_ENDS))
        if rng.random() < 0.3:
            out.append(f" `{rng.choice(COMMANDS)}`")
        return "".join(out)

    def decorate(self, text: str) -> str:
        """Mix in the benchmark's common and rare search terms at their shares."""
        rng = self.rng
        if rng.random() < COMMON_TERM_SHARE:
            text = f"{text} {rng.choice(COMMON_PHRASES).capitalize()}."
        if rng.random() < SELECTIVE_TERM_SHARE:
            text = f"{text} The {SELECTIVE_TERM} deployment is ready."
        return text

    def content(self, mean_words: float) -> str:
        """Return message text: ~5 % CJK, the rest English, with the search terms mixed in."""
        if self.rng.random() < CJK_SHARE:
            return self.decorate(self.cjk(mean_words / 2))
        return self.decorate(self.prose(mean_words))

    def tool_args(self, tool: str) -> dict[str, Any]:
        """Return plausible JSON arguments for a tool call."""
        rng = self.rng
        if tool == "terminal":
            return {"command": rng.choice(COMMANDS), "timeout": rng.choice((60, 120, 300))}
        if tool in ("read_file", "write_file", "patch"):
            args: dict[str, Any] = {"path": rng.choice(PATHS)}
            if tool == "write_file":
                args["content"] = self.prose(25)
            elif tool == "patch":
                args["old_string"] = self.words(6)
                args["new_string"] = self.words(7)
            return args
        if tool == "search_files":
            return {"pattern": rng.choice(DEV_WORDS), "path": "."}
        if tool == "web_search":
            return {"query": self.words(5).rstrip(".")}
        if tool == "browser_navigate":
            return {"url": f"https://docs.example.com/{rng.choice(DEV_WORDS)}/{rng.randint(1, 99)}"}
        if tool == "send_message":
            return {"target": f"telegram:{rng.randint(10_000, 99_999)}", "message": self.words(8)}
        if tool == "execute_code":
            return {"code": f"import json\nprint(json.dumps({{'n': {rng.randint(1, 999)}}}))"}
        return {
            "todos": [{"id": str(i), "content": self.words(5), "status": "pending"} for i in (1, 2)]
        }

    def tool_output(self, tool: str) -> str:
        """Return a tool result as the JSON text a tool returns."""
        rng = self.rng
        if tool == "terminal":
            body: dict[str, Any] = {
                "output": self.prose(110),
                "exit_code": rng.choice((0, 0, 0, 1)),
            }
        elif tool == "read_file":
            n = min(300, max(3, int(rng.lognormvariate(math.log(20), 0.8))))
            lines = [f"{i + 1}|{self.words(rng.randint(3, 9))}" for i in range(n)]
            body = {"content": "\n".join(lines), "total_lines": len(lines) + rng.randint(0, 400)}
        elif tool == "web_search":
            body = {
                "results": [
                    {
                        "title": self.words(5),
                        "url": f"https://example.org/{i}",
                        "snippet": self.words(14),
                    }
                    for i in range(rng.randint(3, 8))
                ]
            }
        else:
            body = {"success": True, "detail": self.prose(20)}
        return self.decorate(json.dumps(body, ensure_ascii=False))


class Conversation:
    """Builds one session's messages turn by turn."""

    def __init__(self, rng: random.Random, text: TextMaker, start: float) -> None:
        self.rng = rng
        self.text = text
        self.ts = start
        self.input_tokens = 0
        self.output_tokens = 0

    def uid(self) -> str:
        """Return a seeded message uid."""
        return f"{self.rng.getrandbits(128):032x}"

    def _tick(self, low: float, high: float) -> float:
        self.ts += self.rng.uniform(low, high)
        return round(self.ts, 6)

    def user(self, content: str | None = None) -> dict[str, Any]:
        """Return a user message."""
        text = content if content is not None else self.text.content(22)
        self.input_tokens += len(text) // 4
        return {
            "role": "user",
            "content": text,
            "timestamp": self._tick(5.0, 900.0),
            "message_uid": self.uid(),
            "token_count": len(text) // 4,
        }

    def assistant(self, *, with_tools: bool) -> list[dict[str, Any]]:
        """Return an assistant message, followed by its tool results when it calls tools."""
        rng = self.rng
        msg: dict[str, Any] = {
            "role": "assistant",
            "timestamp": self._tick(1.0, 40.0),
            "message_uid": self.uid(),
            "finish_reason": "tool_calls" if with_tools else "stop",
        }
        if with_tools and rng.random() < 0.2:
            msg["content"] = ""
        else:
            msg["content"] = self.text.content(14 if with_tools else 70)
        if rng.random() < 0.3:
            msg["reasoning"] = self.text.prose(35)
            if rng.random() < 0.3:
                msg["reasoning_details"] = [
                    {"type": "reasoning.summary", "summary": self.text.words(12), "index": 0}
                ]
        out = [msg]
        if with_tools:
            calls = []
            uids = {}
            for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3)):
                tool = rng.choice(TOOLS)
                call_id = f"call_{rng.getrandbits(96):024x}"
                args = self.text.tool_args(tool)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": tool,
                            "arguments": json.dumps(args, ensure_ascii=False),
                        },
                    }
                )
                uids[call_id] = self.uid()
            msg["tool_calls"] = calls
            msg["tool_call_uids"] = uids
            for call in calls:
                tool = call["function"]["name"]
                out.append(
                    {
                        "role": "tool",
                        "content": self.text.tool_output(tool),
                        "tool_name": tool,
                        "tool_call_id": call["id"],
                        "tool_call_uid": uids[call["id"]],
                        "timestamp": self._tick(0.1, 25.0),
                        "message_uid": self.uid(),
                    }
                )
        size = sum(len(m.get("content") or "") for m in out)
        msg["token_count"] = size // 4
        self.output_tokens += size // 4
        return out

    def turns(self, n: int) -> list[dict[str, Any]]:
        """Return about n messages of user/assistant/tool traffic (exactly n, truncated)."""
        rng = self.rng
        out: list[dict[str, Any]] = []
        while len(out) < n:
            out.append(self.user())
            steps = 1 if rng.random() < 0.5 else rng.randint(2, 6)
            for i in range(steps):
                if len(out) >= n:
                    break
                out.extend(self.assistant(with_tools=i < steps - 1))
        return out[:n]

    def summary(self) -> dict[str, Any]:
        """Return the compression summary that opens a new generation."""
        text = "[CONTEXT COMPACTION] Summary of the earlier conversation: " + self.text.prose(60)
        return {
            "role": "user",
            "content": text,
            "timestamp": self._tick(1.0, 5.0),
            "message_uid": self.uid(),
        }


def kept_copies(msgs: list[dict[str, Any]], k: int = 2) -> list[dict[str, Any]]:
    """Return the retained tail of a generation, as copies carrying the same uid and timestamp."""
    tail = msgs[-k:]
    # A kept tool result needs its call: start the tail at a non-tool row.
    while tail and tail[0]["role"] == "tool" and len(tail) < len(msgs):
        tail = msgs[-(len(tail) + 1) :]
    return [{**m, "active": 1, "compacted": 0} for m in tail]


def session_sizes(
    rng: random.Random, source: str, cap: int, scale: float = DEFAULT_SIZE_SCALE
) -> int:
    """Return a power-law session size (cron jobs are short)."""
    if source == "cron":
        return rng.randint(2, 5)
    return max(2, min(cap, int(scale * rng.paretovariate(1.25))))


def pick(rng: random.Random, weighted: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    """Return one entry of a table whose second column is its weight."""
    return rng.choices(weighted, weights=[w[1] for w in weighted], k=1)[0]


class StoreBuilder:
    """Generates sessions (with lineages and compaction) until the message budget is spent."""

    def __init__(
        self,
        writer: Writer,
        rng: random.Random,
        total: int,
        size_scale: float = DEFAULT_SIZE_SCALE,
    ) -> None:
        self.w = writer
        self.rng = rng
        self.size_scale = size_scale
        self.text = TextMaker(rng)
        self.total = total
        self.left = total
        self.cap = max(50, total // 20)
        self.titles: set[str] = set()
        self.ids: set[str] = set()

    def session_id(self, start: float) -> str:
        """Return a seeded id in the upstream shape YYYYmmdd_HHMMSS_xxxxxx."""
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(start))
        while True:
            sid = f"{stamp}_{self.rng.getrandbits(24):06x}"
            if sid not in self.ids:
                self.ids.add(sid)
                return sid

    def title(self) -> str:
        """Return a fresh unique title."""
        rng = self.rng
        base = f"{rng.choice(TITLE_VERBS)} {rng.choice(TITLE_OBJECTS)}"
        title = base
        while title in self.titles:
            title = f"{base} ({rng.getrandbits(16):04x})"
        self.titles.add(title)
        return title

    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Generate until exactly total messages are queued, then flush."""
        while self.left > 0:
            # Start times follow the message budget, so the data spans the year whatever N is.
            done = (self.total - self.left) / self.total
            self.chain(END_TS - SPAN_S * (1.0 - done) + self.rng.uniform(0.0, 600.0))
            if progress:
                progress(self.total - self.left)
        self.w.flush()

    def chain(self, start: float) -> None:
        """Generate one session, or a compression rotation chain of 2-4 sessions."""
        rng = self.rng
        source = pick(rng, SOURCES)[0]
        model_row = pick(rng, MODELS)
        links = rng.randint(2, 4) if source != "cron" and rng.random() < 0.06 else 1
        base_title = self.title() if rng.random() < 0.6 or links > 1 else None
        columns: dict[str, Any] = {"model": model_row[0]}
        if source in GATEWAY_SOURCES:
            chat = rng.randint(100_000, 999_999)
            columns.update(
                user_id=f"{source}:{rng.randint(1000, 99_999)}",
                session_key=f"agent:main:{source}:dm:{chat}",
                chat_id=str(chat),
                chat_type="dm",
                display_name=f"user{chat % 1000}",
            )
        elif source == "cli":
            columns.update(cwd="/home/dev/hermes", git_branch=rng.choice(("main", "dev", "fix")))
        parent: str | None = None
        carried: list[dict[str, Any]] = []
        for link in range(links):
            if self.left <= 0:
                return
            sid = self.session_id(start)
            extra = {"parent_session_id": parent} if parent else {}
            self.w.create(sid, source, start, **columns, **extra)
            conv = Conversation(self.rng, self.text, start)
            msgs = self.body(conv, source, carried)
            self.w.add_messages(sid, msgs)
            if base_title:
                self.w.title(sid, base_title if link == 0 else f"{base_title} #{link + 1}")
            _, _, price_in, price_out = model_row
            self.w.usage(
                sid,
                model_row[0],
                (start, conv.ts),
                input_tokens=conv.input_tokens,
                output_tokens=conv.output_tokens,
                cache_read_tokens=conv.input_tokens // 2,
                api_call_count=max(1, len(msgs) // 3),
                estimated_cost_usd=round(
                    (conv.input_tokens * price_in + conv.output_tokens * price_out) / 1e6, 6
                ),
            )
            last_link = link == links - 1
            # Sessions of the last two days are still open.
            if not last_link or conv.ts < END_TS - 2 * 86400:
                reason = "compression" if not last_link else self.end_reason(source)
                self.w.end(sid, reason, round(conv.ts + rng.uniform(1.0, 120.0), 6))
            parent = sid
            carried = [m for m in msgs if m.get("active", 1)]
            start = conv.ts + rng.uniform(1.0, 10.0)

    def end_reason(self, source: str) -> str:
        """Return how a session ended."""
        return "cron_complete" if source == "cron" else self.rng.choice(END_REASONS)

    def body(
        self, conv: Conversation, source: str, carried: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Return a session's rows: rotation handoff, turns, maybe an in-place compaction."""
        size = min(self.left, session_sizes(self.rng, source, self.cap, self.size_scale))
        msgs: list[dict[str, Any]] = []
        if carried:  # a rotation child opens with the summary and the parent's kept tail
            msgs.append(conv.summary())
            msgs.extend(kept_copies(carried))
        if size >= 60 and self.rng.random() < 0.15:
            head = conv.turns(int(size * 0.6))
            archived = [{**m, "active": 0, "compacted": 1} for m in head]
            msgs.extend(archived)
            msgs.append(conv.summary())
            msgs.extend(kept_copies(head))
        msgs.extend(conv.turns(max(0, size - len(msgs))))
        msgs = msgs[: min(self.left, max(size, len(msgs)))]
        self.left -= len(msgs)
        return msgs


class SingleSessionBuilder:
    """One huge session (the export memory benchmark), no lineage."""

    def __init__(self, writer: Writer, rng: random.Random, total: int) -> None:
        self.w = writer
        self.rng = rng
        self.total = total

    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Generate one cli session of exactly total messages."""
        start = END_TS - 30 * 86400
        sid = f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(start))}_{self.rng.getrandbits(24):06x}"
        self.w.create(sid, "cli", start, model=MODELS[0][0])
        conv = Conversation(self.rng, TextMaker(self.rng), start)
        done = 0
        while done < self.total:
            chunk = conv.turns(min(BATCH_MESSAGES, self.total - done))
            self.w.add_messages(sid, chunk)
            done += len(chunk)
            if progress:
                progress(done)
        self.w.title(sid, "One very long session")
        self.w.end(sid, "user_exit", round(conv.ts + 1.0, 6))
        self.w.flush()


def default_out(
    messages: int, single_session: bool = False, size_scale: float = DEFAULT_SIZE_SCALE
) -> Path:
    """Return bench/out/store-<N>/ (or store-single-<N>/, store-<N>-s<scale>/)."""
    name = f"store-single-{messages}" if single_session else f"store-{messages}"
    if size_scale != DEFAULT_SIZE_SCALE and not single_session:
        name += f"-s{size_scale:g}"
    return REPO_ROOT / "bench" / "out" / name


def read_meta(out: Path) -> dict[str, Any] | None:
    """Return the generation record next to a store, or None."""
    try:
        return json.loads((out / META_NAME).read_text())
    except (OSError, ValueError):
        return None


def can_reuse(
    out: Path,
    messages: int,
    seed: int,
    single_session: bool,
    size_scale: float = DEFAULT_SIZE_SCALE,
) -> bool:
    """Tell whether out already holds a store generated with these parameters."""
    meta = read_meta(out)
    return (
        meta is not None
        and (out / "state.db").exists()
        and meta.get("messages") == messages
        and meta.get("seed") == seed
        and meta.get("single_session") == single_session
        and meta.get("size_scale", DEFAULT_SIZE_SCALE) == size_scale
        and meta.get("generator_version") == GENERATOR_VERSION
        # A store laid out by older library code would be re-laid (and re-indexed) on open.
        and meta.get("schema") == current_schema_fingerprint()
    )


def schema_fingerprint(db: Path) -> str:
    """Return a hash of every schema object's DDL in the store at db (opened read-only)."""
    uri = Path(db).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(
            "SELECT type, name, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def current_schema_fingerprint() -> str:
    """Return the fingerprint of a store freshly created by the library code in this tree."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        db = Path(tmp) / "state.db"
        open_store(db).close()
        return schema_fingerprint(db)


def file_sha256(path: Path) -> str:
    """Return the sha256 of a closed store file (no connection may have it open)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _clear(out: Path) -> None:
    for name in ("state.db", "state.db-wal", "state.db-shm", META_NAME):
        p = out / name
        if p.exists():
            p.unlink()


def generate(
    out: Path,
    messages: int,
    seed: int = DEFAULT_SEED,
    *,
    single_session: bool = False,
    progress: Callable[[int], None] | None = None,
    size_scale: float = DEFAULT_SIZE_SCALE,
) -> GenerationResult:
    """Build a fresh store of exactly `messages` messages at out/state.db; return what was made."""
    if messages < 1:
        raise ValueError("messages must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    _clear(out)
    db = out / "state.db"
    rng = random.Random(seed)
    t0 = time.perf_counter()
    store = open_store(db)
    try:
        writer = Writer(store)
        builder: StoreBuilder | SingleSessionBuilder
        if single_session:
            builder = SingleSessionBuilder(writer, rng, messages)
        else:
            builder = StoreBuilder(writer, rng, messages, size_scale)
        builder.run(progress)
        counted = store.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        sessions = store.conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    finally:
        store.close()
    seconds = time.perf_counter() - t0
    if counted != messages:
        raise RuntimeError(f"generated {counted} messages, expected {messages}")
    result = GenerationResult(
        path=str(db),
        messages=messages,
        sessions=sessions,
        seed=seed,
        single_session=single_session,
        seconds=round(seconds, 3),
        db_bytes=os.stat(db).st_size,
        sha256=file_sha256(db),
        schema=schema_fingerprint(db),
        size_scale=size_scale,
    )
    (out / META_NAME).write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def ensure_store(
    out: Path,
    messages: int,
    seed: int = DEFAULT_SEED,
    *,
    single_session: bool = False,
    reuse: bool = False,
    progress: Callable[[int], None] | None = None,
    size_scale: float = DEFAULT_SIZE_SCALE,
) -> tuple[GenerationResult, bool]:
    """Return the store at out, generating it unless reuse finds a matching one; say if reused."""
    if reuse and can_reuse(out, messages, seed, single_session, size_scale):
        meta = read_meta(out) or {}
        known = {k: meta[k] for k in GenerationResult.__dataclass_fields__ if k in meta}
        return GenerationResult(**known), True
    made = generate(
        out,
        messages,
        seed,
        single_session=single_session,
        progress=progress,
        size_scale=size_scale,
    )
    return made, False


def progress_printer(total: int, every: int = 50_000) -> Callable[[int], None]:
    """Return a callback printing progress to stderr every `every` messages."""
    state = {"next": every, "t0": time.perf_counter()}

    def report(done: int) -> None:
        if done >= state["next"] or done == total:
            rate = done / max(1e-9, time.perf_counter() - state["t0"])
            print(f"  generated {done:,}/{total:,} messages ({rate:,.0f}/s)", file=sys.stderr)
            while state["next"] <= done:
                state["next"] += every

    return report


def iter_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, help="number of messages (N)")
    p.add_argument(
        "--size-scale",
        type=float,
        default=DEFAULT_SIZE_SCALE,
        help="session length scale (smaller: more, shorter sessions)",
    )
    p.add_argument(
        "--field-report",
        action="store_true",
        help="the field report's shape: 760,000 messages in 59,350 sessions (seed 7)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--out", type=Path, help="HERMES_HOME dir (default bench/out/store-<N>/)")
    p.add_argument("--reuse", action="store_true", help="keep a store made with the same N+seed")
    p.add_argument("--single-session", action="store_true", help="one session of N messages")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.field_report:
        args.messages, args.size_scale = FIELD_REPORT["messages"], FIELD_REPORT["size_scale"]
    if args.messages is None:
        p.error("--messages is required (or --field-report)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Generate a store from the command line and print its record as JSON."""
    args = iter_args(argv)
    out = args.out or default_out(args.messages, args.single_session, args.size_scale)
    progress = None if args.quiet else progress_printer(args.messages)
    result, reused = ensure_store(
        out,
        args.messages,
        args.seed,
        single_session=args.single_session,
        reuse=args.reuse,
        progress=progress,
        size_scale=args.size_scale,
    )
    print(json.dumps({**result.to_dict(), "reused": reused}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
