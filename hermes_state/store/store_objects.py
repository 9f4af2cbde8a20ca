"""The triggers and views a Hermes store may carry, and the ones it must not (SPEC §19).

A trigger runs inside every writer's transaction, the agent's included: a store brought in from
outside (an archive being restored) could carry one that deletes or rewrites messages as they
are written. The agent's own objects are legitimate, so a store may carry exactly the triggers
and views a known release defines (its word, substring and CJK indexes, its display-order and
message-uid triggers), this package's additions (``hermes_*``) and the objects of this
package's layout before SPEC §19. Names are not enough, because a body can be put under any
name: a trigger must also sit on ``messages`` and its body may only maintain search indexes
and the display/uid columns (no DELETE or UPDATE of other rows, no RAISE).
"""

from __future__ import annotations

import re
import sqlite3

from hermes_state.store import cjk, fts, triggers

UPSTREAM_TRIGGERS = frozenset(
    {
        # word and substring indexes (external content since schema 23, inline in 0.19's stores)
        "messages_fts_insert",
        "messages_fts_delete",
        "messages_fts_update",
        "messages_fts_trigram_insert",
        "messages_fts_trigram_delete",
        "messages_fts_trigram_update",
        # the agent's own CJK index (when its tokenizer is available)
        "messages_fts_cjk_insert",
        "messages_fts_cjk_delete",
        "messages_fts_cjk_update",
        # display order and identity, and schema 31's message uid
        "messages_display_order_insert",
        "messages_display_visibility_update",
        "messages_display_identity_update",
        "messages_display_identity_delete",
        triggers.UID_TRIGGER,
    }
)
UPSTREAM_VIEWS = frozenset({fts.WORD_SOURCE, fts.TRIGRAM_SOURCE, "messages_fts_cjk_src"})
OWN_PREFIX = "hermes_"
ALLOWED_TRIGGERS = (
    UPSTREAM_TRIGGERS
    | frozenset(n for n in fts.EXTERNAL_DDL if n not in UPSTREAM_VIEWS)
    | frozenset(fts.LEGACY_TRIGGERS)
    | frozenset(cjk.LEGACY_TRIGGERS)
)
ALLOWED_VIEWS = UPSTREAM_VIEWS

# What a legitimate trigger body may write: the search indexes (and their queues) ...
INDEX_TABLES = frozenset(
    {
        fts.WORD_TABLE,
        fts.TRIGRAM_TABLE,
        "messages_fts_cjk",
        *cjk.LEGACY_TABLES,
    }
)
# ... and these columns of the row being written (display order/identity, message uid).
MESSAGE_COLUMNS = frozenset({"message_uid", "display_order", "display_identity"})

_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_STRING_RE = re.compile(r"'(?:[^']|'')*'")
_IDENT = r'(?:"(?:[^"]|"")+"|\[[^\]]+\]|`[^`]+`|[A-Za-z_][\w$]*)'
_DELETE_RE = re.compile(rf"\bDELETE\s+FROM\s+({_IDENT})", re.I)
_INSERT_RE = re.compile(rf"\b(?:INSERT|REPLACE)\s+(?:OR\s+\w+\s+)?INTO\s+({_IDENT})", re.I)
_UPDATE_RE = re.compile(rf"\bUPDATE\s+(?:OR\s+\w+\s+)?({_IDENT})\s+SET\b", re.I)
_RAISE_RE = re.compile(r"\bRAISE\s*\(", re.I)


def _bare(name: str) -> str:
    """Return an identifier without its quotes, lower-cased."""
    if name[:1] in '"[`':
        name = name[1:-1]
    return name.replace('""', '"').lower()


def _may_write(table: str) -> bool:
    return table in INDEX_TABLES or table.startswith(OWN_PREFIX)


def _assigned_columns(body: str, start: int) -> set[str]:
    """Return the columns an UPDATE ... SET clause starting at start assigns (top level only)."""
    columns: set[str] = set()
    depth = 0
    expect_column = True
    i = start
    while i < len(body):
        ch = body[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == ";" and depth == 0:
            break
        elif depth == 0:
            if ch == ",":
                expect_column = True
            elif expect_column and not ch.isspace():
                match = re.compile(_IDENT).match(body, i)
                if match is None:
                    expect_column = False
                else:
                    word = _bare(match.group(0))
                    if word in ("where", "from", "returning"):
                        break
                    columns.add(word)
                    expect_column = False
                    i = match.end()
                    continue
            elif re.match(r"(?i)(WHERE|FROM|RETURNING)\b", body[i:]) and (
                i == 0 or not (body[i - 1].isalnum() or body[i - 1] == "_")
            ):
                break
        i += 1
    return columns


def trigger_body_problems(sql: str) -> list[str]:
    """Return what in a trigger's SQL no known release's trigger does (empty when it is benign)."""
    text = _STRING_RE.sub("''", _COMMENT_RE.sub(" ", sql or ""))
    begin = re.search(r"\bBEGIN\b", text, re.I)
    body = text[begin.end() :] if begin else text
    problems: list[str] = []
    for match in _DELETE_RE.finditer(body):
        if not _may_write(_bare(match.group(1))):
            problems.append(f"deletes from {_bare(match.group(1))}")
    for match in _INSERT_RE.finditer(body):
        if not _may_write(_bare(match.group(1))):
            problems.append(f"inserts into {_bare(match.group(1))}")
    for match in _UPDATE_RE.finditer(body):
        table = _bare(match.group(1))
        if _may_write(table):
            continue
        if table != "messages":
            problems.append(f"updates {table}")
            continue
        extra = _assigned_columns(body, match.end()) - MESSAGE_COLUMNS
        if extra:
            problems.append(f"updates messages.{', messages.'.join(sorted(extra))}")
    if _RAISE_RE.search(body):
        problems.append("can abort writes (RAISE)")
    return problems


def foreign_objects(conn: sqlite3.Connection) -> list[str]:
    """Describe every trigger and view of the store that no known release or this package
    defines, or whose trigger body does what none of theirs does (empty: all are known)."""
    out: list[str] = []
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') "
        "ORDER BY type, name"
    ).fetchall()
    for kind, name, table, sql in rows:
        own = str(name).startswith(OWN_PREFIX)
        if kind == "view":
            if name not in ALLOWED_VIEWS and not own:
                out.append(f"view {name}")
            continue
        if name not in ALLOWED_TRIGGERS and not own:
            out.append(f"trigger {name} on {table}")
            continue
        if str(table).lower() != "messages":
            out.append(f"trigger {name} on {table} (known triggers are on messages)")
            continue
        problems = trigger_body_problems(sql)
        if problems:
            out.append(f"trigger {name} on {table} ({'; '.join(problems)})")
    return out
