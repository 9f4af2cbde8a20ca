"""Search queries: parsing user text, the FTS5 sanitizer, and LIKE predicates for scans.

A query is OR-groups of AND-ed terms (FTS5 precedence: NOT > AND > OR). ``parse_query`` applies
the sanitizer's rules (SPEC §5) to any text; ``Query.fts()`` renders what the word index can
match, and ``query_like`` the same query as a LIKE predicate for rows no index serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hermes_state import cjk

MAX_QUERY_CHARS = 2048
# Terms past this are dropped: each becomes one SQL expression node in a fallback scan, and
# SQLite refuses an expression tree deeper than 1000 ("Expression tree is too large").
MAX_QUERY_TERMS = 64
MIN_PREFIX_CHARS = 3  # a shorter prefix merges the doclists of a large part of the vocabulary

_OPERATORS = frozenset({"AND", "OR", "NOT"})
_KEYWORDS = frozenset({"AND", "OR", "NOT", "NEAR"})
_JOINERS = "-._"


@dataclass(frozen=True)
class Term:
    """One search term: a word or a quoted phrase, maybe a prefix, maybe negated (NOT)."""

    text: str
    phrase: bool = False
    prefix: bool = False
    negated: bool = False

    @property
    def searchable(self) -> bool:
        """Tell whether the word index can match this term (it has a letter or digit)."""
        return any(ch.isalnum() for ch in self.text)

    def fts(self) -> str:
        """Render the term as FTS5 query syntax (quoted unless it is a plain bareword)."""
        text = self.text
        quote = self.phrase or any(c in text for c in _JOINERS) or text.upper() in _KEYWORDS
        out = '"' + text.replace('"', '""') + '"' if quote else text
        return out + "*" if self.prefix else out


@dataclass(frozen=True)
class Query:
    """A parsed query: OR-groups of AND-ed terms (FTS5 precedence: NOT > AND > OR)."""

    groups: tuple[tuple[Term, ...], ...] = ()

    def terms(self) -> list[Term]:
        """Return every term, in order."""
        return [t for g in self.groups for t in g]

    @property
    def has_cjk(self) -> bool:
        """Tell whether any term contains a CJK word (CJK punctuation alone does not count)."""
        return any(cjk.cjk_runs(t.text) for t in self.terms())

    def fts(self) -> str:
        """Render the query for FTS5 ('' when nothing in it can be matched by words)."""
        parts = []
        for group in self.groups:
            pos = [t.fts() for t in group if not t.negated and t.searchable]
            neg = [t.fts() for t in group if t.negated and t.searchable]
            if pos:
                parts.append(" ".join(pos) + "".join(f" NOT {n}" for n in neg))
        return " OR ".join(parts)


def _clean(text: str) -> str:
    """Cap the query length and blank out what can never be query syntax."""
    text = text[:MAX_QUERY_CHARS]
    # Lone surrogates cannot be bound by sqlite3; control characters are never query syntax.
    return "".join(
        " " if (ch < " " or ch == "\x7f") else ch for ch in text if not ("\ud800" <= ch <= "\udfff")
    )


def _split_word(raw: str) -> list[tuple[str, str, bool]]:
    """Split an unquoted chunk into ("op", OP, False) and ("word", text, prefix) tokens."""
    # Operator punctuation becomes a space; letters, digits, non-ASCII, joiners and '*' stay.
    kept = "".join(
        ch if (ord(ch) > 127 or ch.isalnum() or ch in _JOINERS or ch == "*") else " " for ch in raw
    )
    out: list[tuple[str, str, bool]] = []
    for piece in kept.split():
        if piece in _OPERATORS:
            out.append(("op", piece, False))
            continue
        parts = piece.split("*")
        for i, part in enumerate(parts):
            word = part.strip(_JOINERS)
            if word:  # a '*' with no word before it is stray and dropped
                out.append(("word", word, i < len(parts) - 1))
    return out


def _cjk_with_punctuation(chunk: str) -> bool:
    """Tell whether an unquoted chunk holds CJK and punctuation that would split it."""
    from hermes_state.cjk import has_cjk

    punctuated = any(
        not (ord(ch) > 127 or ch.isalnum() or ch in _JOINERS or ch == "*") for ch in chunk
    )
    return punctuated and has_cjk(chunk)


def _tokens(text: str) -> list[tuple[str, str, bool]]:
    """Scan text into operator, word and phrase tokens (unbalanced quotes dropped)."""
    tokens: list[tuple[str, str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            end = text.find('"', i + 1)
            if end == -1:
                i += 1  # an unbalanced quote is dropped
                continue
            inner = text[i + 1 : end]
            i = end + 1
            prefix = i < n and text[i] == "*"
            while i < n and text[i] == "*":
                i += 1
            tokens.append(("phrase", inner, prefix))
        elif ch.isspace():
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] != '"':
                j += 1
            chunk = text[i:j]
            if _cjk_with_punctuation(chunk):
                # CJK is written without spaces: "100%完成" means that text, not two words.
                tokens.append(("phrase", chunk, False))
            else:
                tokens.extend(_split_word(chunk))
            i = j
    return tokens


def _dangling(token: tuple[str, str, bool]) -> bool:
    """Tell whether a token is an operator that would dangle at either end of the query."""
    kind, text, prefix = token
    return kind == "op" or (kind == "word" and not prefix and text.upper() in _OPERATORS)


def parse_query(text: str) -> Query:
    """Parse user text into a Query, applying the sanitizer's rules."""
    tokens = _tokens(_clean(text or ""))
    while tokens and _dangling(tokens[0]):
        tokens.pop(0)
    while tokens and _dangling(tokens[-1]):
        tokens.pop()
    groups: list[list[Term]] = []
    pending: str | None = None
    kept = 0
    for kind, value, prefix in tokens:
        if kept >= MAX_QUERY_TERMS:
            break
        if kind == "op":
            pending = value  # of several operators in a row, the last one counts
            continue
        if kind == "phrase" and not value.strip():
            pending = None
            continue
        term = Term(value, phrase=kind == "phrase", prefix=prefix, negated=pending == "NOT")
        if not groups or pending == "OR":
            groups.append([])
        if not groups[-1] and term.negated:
            term = Term(term.text, phrase=term.phrase, prefix=term.prefix)
        groups[-1].append(term)
        kept += 1
        pending = None
    return Query(tuple(tuple(g) for g in groups if g))


def sanitize_fts5_query(text: str) -> str:
    """Turn any user text into a valid FTS5 query, or '' when nothing searchable is left."""
    return parse_query(text).fts()


def tame_prefixes(query: Query) -> Query:
    """Search a prefix shorter than MIN_PREFIX_CHARS as a word (th* matches most rows)."""
    return Query(
        tuple(
            tuple(
                Term(t.text, phrase=t.phrase, negated=t.negated)
                if t.prefix and len(t.text) < MIN_PREFIX_CHARS
                else t
                for t in group
            )
            for group in query.groups
        )
    )


# --- LIKE predicates ------------------------------------------------------------------------


def like_pattern(text: str) -> str:
    """Return a LIKE pattern (ESCAPE '\\') matching text anywhere."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def term_like(term: Term) -> tuple[str, tuple[Any, ...]]:
    """SQL that is true when a message contains the term's text (content, tool name or calls)."""
    pat = like_pattern(term.text)
    sql = (
        f"((m.content LIKE ? ESCAPE '\\') OR {_STRUCTURED_LIKE} "
        "OR (m.tool_name LIKE ? ESCAPE '\\') OR (m.tool_calls LIKE ? ESCAPE '\\')) IS 1"
    )
    return (f"NOT {sql}" if term.negated else sql), (pat, pat, pat, pat)


# Structured content is stored behind a NUL marker (content.STRUCTURED_SENTINEL), and LIKE
# stops reading text at a NUL: such content ("< ' '", a cheap comparison) is matched without
# its first byte. It costs a full scan 5-10 % more than LIKE alone.
_STRUCTURED_LIKE = (
    "(m.content < ' ' AND CAST(substr(CAST(m.content AS BLOB), 2) AS TEXT) LIKE ? ESCAPE '\\')"
)


def _group_like(terms: Sequence[Term]) -> tuple[str, tuple[Any, ...]] | None:
    """Compile one AND-group to a LIKE predicate (None for a group of negations only)."""
    if not any(not t.negated for t in terms):
        return None  # a group of only negations matches nearly everything: dropped
    parts: list[str] = []
    params: list[Any] = []
    for term in terms:
        sql, p = term_like(term)
        parts.append(sql)
        params.extend(p)
    return "(" + " AND ".join(parts) + ")", tuple(params)


def query_like(query: Query) -> tuple[str, tuple[Any, ...]]:
    """Compile the whole query to a LIKE predicate (OR of AND-groups); '0' if nothing is left."""
    groups = [g for g in (_group_like(grp) for grp in query.groups) if g is not None]
    if not groups:
        return "0", ()
    return "(" + " OR ".join(sql for sql, _ in groups) + ")", tuple(
        p for _, params in groups for p in params
    )
