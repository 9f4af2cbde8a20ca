"""Measure how much room each FTS index takes next to the raw message text.

Generates a store of N messages through the library (realistic mixed English, ~5 % CJK text,
tool calls as JSON, tool output with paths and hashes), then prints the bytes of each index
(from the ``dbstat`` virtual table, or page-count differences when this SQLite lacks it) against
the raw message text, and the whole-file ratio. ``--time-search`` also times a few searches.

    python bench/fts_sizes.py                  # 100,000 messages
    python bench/fts_sizes.py --messages 1000000 --time-search --keep /tmp/big.db
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state.records import messages, sessions
from hermes_state.search import search
from hermes_state.store import fts
from hermes_state.store.connection import Store, open_store


def _split(text: str) -> tuple[str, ...]:
    """Return the space-separated words of text."""
    return tuple(text.split())


WORDS = _split(
    "the of and to a in is it you that he was for on are with as I his they be at one "
    "have this from or had by hot word but what some we can out other were all there when "
    "up use your how said an each she which do their time if will way about many then "
    "them write would like so these her long make thing see him two has look more day "
    "could go come did number sound no most people my over know water than call first who "
    "may down side been now find any new work part take get place made live where after "
    "back little only round man year came show every good me give our under name very "
    "through just form sentence great think say help low line differ turn cause much mean "
    "before move right boy old too same tell does set three want air well also play small "
    "end put home read hand port large spell add even land here must big"
)
TECH = _split(
    "docker kubernetes python error deploy build container image volume network postgres "
    "redis nginx config yaml json request response timeout retry cache index query "
    "migration schema commit branch merge rebase pipeline test pytest fixture module "
    "package install upgrade server client socket thread process memory cpu latency "
    "throughput gateway session token prompt model context window compression summary "
    "telegram discord slack webhook cron agent"
)
CJK_WORDS = _split(
    "東京 会議 数据 大阪 資料 確認 設定 問題 解決 今日 明日 予定 "
    "連絡 お願い します ありがとう データベース サーバー エラー 修正 "
    "完了 数据库 服务器 错误 修复 测试 部署 配置 文件 用户 系统 网络 "
    "缓存 查询 迁移 会话 模型 上下文 压缩 摘要 회의 서버 데이터 오류 설정"
)
CJK_GLUE = ("で", "の", "を", "に", "が", "は", "、", "。", "和", "的", "了", " ")
TOOLS = ("terminal", "read_file", "write_file", "web_search", "patch", "search_files")


def _zipf_choice(rng: random.Random, seq: tuple[str, ...] | list[str]) -> str:
    """Pick from seq with a roughly Zipfian bias towards the front."""
    return seq[min(len(seq) - 1, int(rng.paretovariate(1.1)) - 1)]


SYLLABLES = _split("ka lo mi ne ru sa to vi zu qe xo ja fe pi")
RARE_WORDS = 20_000  # the long tail of a real vocabulary: names, identifiers, jargon


def rare_word(n: int) -> str:
    """Return the n-th word of the long-tail vocabulary (stable, pronounceable)."""
    parts = []
    for _ in range(4):
        n, k = divmod(n, len(SYLLABLES))
        parts.append(SYLLABLES[k])
    return "".join(parts) + "x"


def english(rng: random.Random, n_words: int) -> str:
    """Return n_words of English-like text with technical and long-tail words."""
    out = []
    for _ in range(n_words):
        roll = rng.random()
        if roll < 0.03:
            out.append(rare_word(rng.randrange(RARE_WORDS)))
        elif roll < 0.18:
            out.append(rng.choice(TECH))
        else:
            out.append(_zipf_choice(rng, WORDS))
    text = " ".join(out)
    return text[:1].upper() + text[1:] + "."


def cjk(rng: random.Random, n_words: int) -> str:
    """Return mixed-language text: CJK words glued by particles, with a few Latin words."""
    out = []
    for _ in range(n_words):
        out.append(rng.choice(CJK_WORDS))
        out.append(rng.choice(CJK_GLUE))
        if rng.random() < 0.1:
            out.append(f" {rng.choice(TECH)} ")
    return "".join(out)


def tool_output(rng: random.Random) -> str:
    """Return log-like tool output: paths, numbers, hashes, English fragments."""
    lines = []
    # Heavy tail: most results are a few lines, some are whole files or long command output.
    for _ in range(min(500, int(rng.paretovariate(1.1) * 8))):
        kind = rng.random()
        if kind < 0.3:
            lines.append(f"/srv/app/{rng.choice(TECH)}/{rng.choice(WORDS)}_{rng.randint(1, 99)}.py")
        elif kind < 0.5:
            lines.append(f"{rng.getrandbits(64):016x} {rng.randint(0, 10**6)} {rng.choice(TECH)}")
        else:
            lines.append(english(rng, rng.randint(4, 14)))
    return "\n".join(lines)


def tool_calls(rng: random.Random) -> list[dict]:
    """Return an OpenAI-style tool call list."""
    name = rng.choice(TOOLS)
    args = {"command": f"{rng.choice(TECH)} {rng.choice(WORDS)} --{rng.choice(TECH)}"}
    call_id = f"call_{rng.getrandbits(48):012x}"
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
    ]


def session_messages(rng: random.Random, count: int) -> Iterator[dict]:
    """Yield count messages of one conversation (user, assistant with tools, tool results)."""
    base = time.time() - rng.uniform(0, 90 * 86400)
    for i in range(count):
        ts = base + i * 7.0
        step = i % 4
        is_cjk = rng.random() < 0.05
        if step == 0:
            text = cjk(rng, rng.randint(3, 20)) if is_cjk else english(rng, rng.randint(5, 40))
            yield {"role": "user", "content": text, "timestamp": ts}
        elif step == 1:
            yield {
                "role": "assistant",
                "content": english(rng, rng.randint(3, 20)),
                "tool_calls": tool_calls(rng),
                "timestamp": ts,
            }
        elif step == 2:
            yield {
                "role": "tool",
                "content": tool_output(rng),
                "tool_name": rng.choice(TOOLS),
                "timestamp": ts,
            }
        else:
            text = cjk(rng, rng.randint(5, 60)) if is_cjk else english(rng, rng.randint(20, 300))
            yield {"role": "assistant", "content": text, "timestamp": ts}


def generate(store: Store, total: int, seed: int) -> None:
    """Fill the store with total messages in power-law sized sessions."""
    rng = random.Random(seed)
    written = 0
    n = 0
    started = time.monotonic()
    while written < total:
        size = min(total - written, max(2, int(rng.paretovariate(1.2) * 8)), 4000)
        sid = f"bench-{n:07d}"
        source = rng.choice(("cli", "cli", "telegram", "discord", "cron"))
        sessions.create_session(store, sid, source, model="bench-model")
        batch = list(session_messages(rng, size))
        for start in range(0, len(batch), 500):
            messages.append_messages(store, sid, batch[start : start + 500])
        written += size
        n += 1
        if n % 200 == 0:
            rate = written / (time.monotonic() - started)
            print(f"\r  {written:,}/{total:,} messages ({rate:,.0f}/s)", end="", file=sys.stderr)
    print(file=sys.stderr)


INDEX_GROUPS = {
    "messages_fts (words)": "messages_fts",
    "messages_fts_trigram (substring)": "messages_fts_trigram",
    "messages_fts_cjk (CJK bigrams)": "messages_fts_cjk",
}


def table_bytes(conn: sqlite3.Connection) -> dict[str, int]:
    """Return bytes used per table/index, from dbstat (or page-count differences without it)."""
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        return {name: int(size) for name, size in rows}
    except sqlite3.OperationalError:
        return _bytes_by_dropping(conn)


def _bytes_by_dropping(conn: sqlite3.Connection) -> dict[str, int]:
    """Measure each FTS index in a scratch copy: page_count before and after dropping it."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = sqlite3.connect(Path(tmp) / "copy.db", isolation_level=None)
        try:
            conn.backup(copy)
            page = copy.execute("PRAGMA page_size").fetchone()[0]
            out = {}
            for table in INDEX_GROUPS.values():
                copy.execute("VACUUM")
                before = copy.execute("PRAGMA page_count").fetchone()[0]
                copy.execute(f"DROP TABLE IF EXISTS {table}")
                copy.execute("VACUUM")
                out[f"{table}_data"] = (
                    before - copy.execute("PRAGMA page_count").fetchone()[0]
                ) * page
            return out
        finally:
            copy.close()


def group_bytes(sizes: dict[str, int]) -> dict[str, int]:
    """Sum the shadow tables of each FTS index, and the rest of the file."""
    out = {}
    claimed = set()
    for label, prefix in INDEX_GROUPS.items():
        names = [n for n in sizes if n.startswith(prefix + "_") and _owner(n) == prefix]
        out[label] = sum(sizes[n] for n in names)
        claimed.update(names)
    out["messages table"] = sizes.get("messages", 0)
    claimed.add("messages")
    message_indexes = [n for n in sizes if n.startswith("idx_messages")]
    out["messages indexes"] = sum(sizes[n] for n in message_indexes)
    claimed.update(message_indexes)
    out["everything else"] = sum(v for n, v in sizes.items() if n not in claimed)
    return out


def _owner(shadow: str) -> str:
    """Return the FTS table a shadow table belongs to ('' for other tables)."""
    for prefix in sorted(INDEX_GROUPS.values(), key=len, reverse=True):
        rest = shadow[len(prefix) + 1 :]
        if shadow.startswith(prefix + "_") and rest in (
            "data",
            "idx",
            "content",
            "docsize",
            "config",
        ):
            return prefix
    return ""


def report(store: Store, label: str) -> None:
    """Print index sizes against the raw text."""
    conn = store.conn
    content, calls, names, count = conn.execute(
        "SELECT COALESCE(SUM(length(CAST(content AS BLOB))), 0), "
        "COALESCE(SUM(length(CAST(tool_calls AS BLOB))), 0), "
        "COALESCE(SUM(length(CAST(tool_name AS BLOB))), 0), count(*) FROM messages"
    ).fetchone()
    raw = content + calls + names
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    file_bytes = page_size * pages
    print(f"\n== {label}: {count:,} messages ==")
    print(f"raw message text: {raw:,} bytes (content {content:,}, tool_calls {calls:,})")
    for name, size in group_bytes(table_bytes(conn)).items():
        print(f"  {name:34s} {size:>14,} bytes  {size / raw:5.2f}x raw text")
    print(
        f"  {'whole file (pages in use)':34s} {file_bytes - free * page_size:>14,} bytes  "
        f"{(file_bytes - free * page_size) / raw:5.2f}x raw text"
    )
    print(f"  {'whole file':34s} {file_bytes:>14,} bytes  {file_bytes / raw:5.2f}x raw text")


def _raw_sql(route: str, query: str) -> tuple[str, tuple] | None:
    """Return the plain FTS5 statement serving the same route, for comparison."""
    if route == "word":
        sql = (
            "SELECT rowid, snippet(messages_fts, -1, '>>>', '<<<', '...', 40) "
            "FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20"
        )
        return sql, (search.sanitize_fts5_query(query),)
    if route == "trigram":
        sql = (
            "SELECT rowid FROM messages_fts_trigram WHERE content LIKE ? "
            "ORDER BY rowid DESC LIMIT 20"
        )
        return sql, (f"%{query}%",)
    if route == "cjk":
        match = " ".join(fts.cjk_match_expr(r) for r in fts.cjk_runs(query))
        sql = (
            "SELECT rowid FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ? "
            "ORDER BY rank LIMIT 20"
        )
        return sql, (match,)
    return None


def _best_ms(fn: Callable[[], object], repeat: int = 3) -> float:
    """Return the best wall time of fn over repeat runs, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def time_searches(store: Store) -> None:
    """Time searches through the library against the raw FTS5 statement of the same index."""
    conn = store.conn
    cases = [
        ("common word", "the"),
        ("tech word", "docker"),
        ("two words", "docker timeout"),
        ("selective", rare_word(11)),
        ("selective 2", f"{rare_word(11)} OR {rare_word(12)}"),
        ("hyphenated", "read-file"),
        ("prefix", "dock*"),
        ("substring", "ocker"),
        ("CJK 2-char", "東京"),
        ("CJK 1-char", "議"),
        ("CJK + word", "数据库 docker"),
    ]
    search.search_messages(store, "warm up")
    print("\n== search timings: top 20 with snippets and context, best of 3 ==")
    for label, query in cases:
        result = search.search_messages(store, query)
        ours = _best_ms(lambda q=query: search.search_messages(store, q))
        raw = _raw_sql(result.route, query)
        raw_ms = _best_ms(lambda r=raw: conn.execute(*r).fetchall()) if raw else float("nan")
        print(
            f"  {label:12s} {query!r:28s} {ours:7.1f} ms  hits={len(result):2d} "
            f"route={result.route:7s} ordering={result.ordering:11s} "
            f"raw FTS5 {raw_ms:7.1f} ms  ratio {ours / raw_ms:5.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    """Generate a store, print FTS index sizes, optionally time searches."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="write the store here and keep it")
    parser.add_argument("--reuse", action="store_true", help="measure an existing --keep store")
    parser.add_argument("--time-search", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "state.db"
        if not args.reuse:
            if path.exists():
                parser.error(f"{path} exists (use --reuse to measure it)")
            store = open_store(path)
            started = time.monotonic()
            generate(store, args.messages, args.seed)
            print(f"generated in {time.monotonic() - started:.1f}s", file=sys.stderr)
        else:
            store = open_store(path)
        try:
            store.checkpoint_passive()
            report(store, "as written")
            store.write(fts.optimize)
            store.conn.execute("VACUUM")
            report(store, "after fts.optimize + VACUUM")
            if args.time_search:
                time_searches(store)
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
