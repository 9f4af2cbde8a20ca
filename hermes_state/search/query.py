"""Search queries: parsing user text, the FTS5 sanitizer, LIKE predicates, and exclusions.

A query is OR-groups of AND-ed terms. A negated term (``-word``, ``-"a phrase"``, ``NOT word``)
is an exclusion: a search leaves out every message that contains it, wherever it stands in the
query (``a OR b -c`` finds a or b, then drops the messages with c), and checks it the same way
on every route (:func:`exclusion_sql`), so the index that answers never changes what is left out.
``parse_query`` is lenient (the sanitizer's rules, SPEC §5: any text gives a query);
``query_problem`` names what a strict reader refuses instead of guessing (the CLI's rule: an
operator is honoured or refused, never dropped). ``Query.fts()`` renders FTS5's own reading for
the sanitizer, and ``query_like`` the wanted terms as a LIKE predicate for rows no index serves.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from hermes_state.shapes.content import STRUCTURED_SENTINEL, content_text
from hermes_state.store import cjk

MAX_QUERY_CHARS = 2048
# Terms past this are dropped: each becomes one SQL expression node in a fallback scan, and
# SQLite refuses an expression tree deeper than 1000 ("Expression tree is too large").
MAX_QUERY_TERMS = 64
MIN_PREFIX_CHARS = 3  # a shorter prefix merges the doclists of a large part of the vocabulary

_OPERATORS = frozenset({"AND", "OR", "NOT"})
_KEYWORDS = frozenset({"AND", "OR", "NOT", "NEAR"})
_JOINERS = "-._"
HAS_WORDS_FUNCTION = "hermes_has_words"  # the SQL function exclusions are checked with

# `name:` at the start of a word: FTS5's column filter, or a filter people expect from other
# search boxes. Each is refused with where the filter lives instead.
_FIELD_HINTS = {
    "role": "filter roles with --role ROLE",
    "source": "filter sources with --source SOURCE",
    "content": "every word is searched in message text, tool names and tool calls alike",
    "tool_name": "every word is searched in message text, tool names and tool calls alike",
    "tool_calls": "every word is searched in message text, tool names and tool calls alike",
    "model": "the model is a column of `hermes sessions list`, not a search filter",
    "title": "titles are not searched; `hermes sessions show TITLE` opens a session by title",
    "session": "`hermes sessions show ID` shows one session",
    "tool": "filter tool output with --role tool",
}
_FIELD = re.compile(r"([A-Za-z_]+):")
_COLUMN_SET = re.compile(r"\{[^{}]*\}\s*:")
# Punctuation standing alone, which other query languages read as an operator.
_LONE = {
    "-": "'-' must touch what it leaves out: -word or -\"a phrase\"",
    "+": "'+' joins nothing here; every word must match already, and \"a b\" is a phrase",
    "|": "'|' is not OR here; write OR between alternatives",
    "||": "'||' is not OR here; write OR between alternatives",
    "&": "'&' is not needed: every word must match already",
    "&&": "'&&' is not needed: every word must match already",
    "!": "'!' is not NOT here; write -word or NOT word",
    "*": "a lone '*' matches nothing; put it at the end of a word: build*",
}
QUOTE_HINT = 'to search for the text itself, put it in "quotes"'


@dataclass(frozen=True)
class Term:
    """One search term: a word or a quoted phrase, maybe a prefix, maybe negated (excluded)."""

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
    """A parsed query: OR-groups of AND-ed terms; negated terms are exclusions."""

    groups: tuple[tuple[Term, ...], ...] = ()

    def terms(self) -> list[Term]:
        """Return every term, in order."""
        return [t for g in self.groups for t in g]

    @property
    def has_cjk(self) -> bool:
        """Tell whether any term contains a CJK word (CJK punctuation alone does not count)."""
        return any(cjk.cjk_runs(t.text) for t in self.terms())

    def wanted(self) -> Query:
        """Return the query without its exclusions (a group of only exclusions goes too)."""
        groups = (tuple(t for t in g if not t.negated) for g in self.groups)
        return Query(tuple(g for g in groups if g))

    def exclusions(self) -> list[Term]:
        """Return the exclusions a search can check (each once; ones with nothing to match go)."""
        kept: dict[Term, None] = {}
        for term in self.terms():
            if term.negated and _excludable(term):
                kept[term] = None
        return list(kept)

    def fts(self) -> str:
        """Render the query as FTS5 reads it, NOT binding to its AND-group ('' if no words)."""
        parts = []
        for group in self.groups:
            pos = [t.fts() for t in group if not t.negated and t.searchable]
            neg = [t.fts() for t in group if t.negated and t.searchable]
            if pos:
                parts.append(" ".join(pos) + "".join(f" NOT {n}" for n in neg))
        return " OR ".join(parts)


@dataclass(frozen=True)
class QueryProblem:
    """What a strict reader says of a query: what is wrong, and what to write instead.

    A ``refused`` problem stops the search; the others (a query cut to its first terms) are
    said beside its answer.
    """

    message: str
    hint: str
    refused: bool = True


class _Token(NamedTuple):
    """One piece of a query: an operator, a word or a phrase (maybe a prefix, maybe negated)."""

    kind: str  # "op", "word" or "phrase"
    text: str
    prefix: bool = False
    negated: bool = False


def _excludable(term: Term) -> bool:
    """Tell whether an exclusion can match anything (words, or CJK text)."""
    return term.searchable or bool(cjk.cjk_runs(term.text))


def _clean(text: str) -> str:
    """Cap the query length and blank out what can never be query syntax."""
    text = text[:MAX_QUERY_CHARS]
    # Lone surrogates cannot be bound by sqlite3; control characters are never query syntax.
    return "".join(
        " " if (ch < " " or ch == "\x7f") else ch for ch in text if not ("\ud800" <= ch <= "\udfff")
    )


def _kept_char(ch: str) -> bool:
    """Tell whether a character outside quotes belongs to a word (not operator punctuation)."""
    return ord(ch) > 127 or ch.isalnum() or ch in _JOINERS or ch == "*"


def _split_word(raw: str, problems: list[QueryProblem]) -> list[_Token]:
    """Split an unquoted chunk into operator and word tokens (a word may end in '*')."""
    # Operator punctuation becomes a space; letters, digits, non-ASCII, joiners and '*' stay.
    kept = "".join(ch if _kept_char(ch) else " " for ch in raw)
    out: list[_Token] = []
    for piece in kept.split():
        if piece in _OPERATORS:
            out.append(_Token("op", piece))
            continue
        bare = piece.strip(_JOINERS)
        stem = bare.rstrip("*")
        if "*" in stem or (bare and not stem):
            where = f"'*' inside {piece!r}" if stem else "a lone '*'"
            problems.append(
                QueryProblem(
                    f"{where} is not a wildcard here",
                    "'*' goes at the end of a word: build* matches build, builds, building",
                )
            )
        parts = piece.split("*")
        for i, part in enumerate(parts):
            word = part.strip(_JOINERS)
            if word:  # a '*' with no word before it is stray and dropped
                out.append(_Token("word", word, i < len(parts) - 1))
    return out


def _cjk_with_punctuation(chunk: str) -> bool:
    """Tell whether an unquoted chunk holds CJK and punctuation that would split it."""
    return any(not _kept_char(ch) for ch in chunk) and cjk.has_cjk(chunk)


def _chunk_problems(chunk: str, problems: list[QueryProblem]) -> None:
    """Note the operators of other query languages at the start or end of an unquoted chunk."""
    if chunk in _LONE:
        problems.append(QueryProblem(f"{chunk!r} alone is not an operator", _LONE[chunk]))
        return
    head = chunk.lstrip("-+")  # what a stray sign before it does not change
    field = _FIELD.match(head)
    if field and field.group(1).lower() in _FIELD_HINTS:
        name = field.group(1)
        problems.append(
            QueryProblem(
                f"{name}: filters are not supported in the query",
                f"{_FIELD_HINTS[name.lower()]}; {QUOTE_HINT}",
            )
        )
    elif head.startswith("NEAR("):
        problems.append(
            QueryProblem(
                "NEAR(...) is not supported",
                f'"a phrase" matches words next to each other; {QUOTE_HINT}',
            )
        )
    elif head.startswith("(") or chunk.count(")") > chunk.count("("):
        problems.append(
            QueryProblem(
                "parentheses do not group here",
                "write alternatives as a b OR c (that is: both a and b, or c); " + QUOTE_HINT,
            )
        )
    elif head.startswith("^") and len(head) > 1:
        problems.append(
            QueryProblem("'^' (match at the start of a text) is not supported", QUOTE_HINT)
        )
    elif head.startswith("!") and len(head) > 1:
        problems.append(
            QueryProblem("'!' is not NOT here", f"write -word or NOT word; {QUOTE_HINT}")
        )


def _negated_chunk(tokens: list[_Token]) -> list[_Token]:
    """Turn the tokens of a '-chunk' into one exclusion (several words: a phrase of them)."""
    words = [t for t in tokens if t.text]
    if len(words) == 1:
        return [_Token("word", words[0].text, words[0].prefix, True)]
    # "-foo:bar" leaves out what the chunk says, the words in that order, as the index reads it.
    return [_Token("phrase", " ".join(t.text for t in words), words[-1].prefix, True)]


def _tokens(text: str, problems: list[QueryProblem]) -> list[_Token]:
    """Scan text into operator, word and phrase tokens (unbalanced quotes dropped)."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        negated = False
        if (
            ch == "-"
            and i + 1 < n
            and (text[i + 1] == '"' or text[i + 1].isalnum() or ord(text[i + 1]) > 127)
        ):
            # -word and -"a phrase" leave text out; "--flag" and a lone "-" are not exclusions.
            negated, i, ch = True, i + 1, text[i + 1]
        if ch == '"':
            end = text.find('"', i + 1)
            if end == -1:
                problems.append(QueryProblem("a quote is not closed", 'close the phrase: "a b"'))
                i += 1  # an unbalanced quote is dropped
                continue
            inner = text[i + 1 : end]
            i = end + 1
            prefix = i < n and text[i] == "*"
            while i < n and text[i] == "*":
                i += 1
            if not inner.strip():
                problems.append(QueryProblem('an empty phrase ("") matches nothing', 'write "a b"'))
            tokens.append(_Token("phrase", inner, prefix, negated))
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] != '"':
            j += 1
        chunk = text[i:j]
        _chunk_problems(chunk, problems)
        if _cjk_with_punctuation(chunk):
            # CJK is written without spaces: "100%完成" means that text, not two words.
            tokens.append(_Token("phrase", chunk, False, negated))
        else:
            split = _split_word(chunk, problems)
            if negated and split:
                split = _negated_chunk(split)
            tokens.extend(split)
        i = j
    return tokens


def _parse(text: str) -> tuple[Query, list[QueryProblem]]:
    """Parse user text into a Query, noting what a strict reader would refuse."""
    problems: list[QueryProblem] = []
    raw = text if isinstance(text, str) else ""
    if len(raw) > MAX_QUERY_CHARS:
        problems.append(
            QueryProblem(
                f"only the first {MAX_QUERY_CHARS:,} characters of the query were searched",
                "shorten it",
                refused=False,
            )
        )
    cleaned = _clean(raw)
    unquoted = re.sub(r'"[^"]*"', " ", cleaned)
    if _COLUMN_SET.search(unquoted):
        problems.append(
            QueryProblem("{column set}: filters are not supported in the query", QUOTE_HINT)
        )
    tokens = _tokens(cleaned, problems)
    # A leading AND/OR and any trailing operator dangle; a leading NOT negates what follows.
    while tokens and tokens[0].kind == "op" and tokens[0].text != "NOT":
        problems.append(_dangling(tokens.pop(0).text, "start"))
    while tokens and tokens[-1].kind == "op":
        problems.append(_dangling(tokens.pop().text, "end"))
    groups: list[list[Term]] = []
    join: str | None = None
    negate = False
    previous: str | None = None
    kept = 0
    for token in tokens:
        if token.kind == "op":
            if previous is not None and not (token.text == "NOT" and previous != "NOT"):
                problems.append(_in_a_row(previous, token.text))  # AND NOT, OR NOT are fine
            previous = token.text
            if token.text == "NOT":
                negate = True
            else:
                # Of several operators in a row, the last AND/OR counts (the sanitizer's rule).
                join, negate = token.text, False
            continue
        previous = None
        if token.kind == "phrase" and not token.text.strip():
            join, negate = None, False
            continue
        if kept >= MAX_QUERY_TERMS:
            problems.append(
                QueryProblem(
                    f"only the first {MAX_QUERY_TERMS} terms of the query were searched",
                    "shorten it",
                    refused=False,
                )
            )
            break
        if negate and token.negated:
            problems.append(
                QueryProblem("NOT -word is a double negation", "write NOT word or -word")
            )
        term = Term(token.text, token.kind == "phrase", token.prefix, negate or token.negated)
        if term.negated and not _excludable(term):
            problems.append(
                QueryProblem(
                    f"nothing to leave out in {token.text!r}",
                    "an exclusion needs letters, digits or CJK text",
                )
            )
        if not groups or join == "OR":
            groups.append([])
        groups[-1].append(term)
        kept += 1
        join, negate = None, False
    query = Query(tuple(tuple(g) for g in groups if g))
    problems.extend(_exclusion_problems(query))
    return query, problems


def _dangling(op: str, end: str) -> QueryProblem:
    """The problem of an operator with nothing on one side."""
    side = "before" if end == "start" else "after"
    return QueryProblem(
        f"{op} at the {end} of the query has nothing {side} it",
        f"write a {op} b, or put {op} in quotes to search for the word",
    )


def _in_a_row(first: str, second: str) -> QueryProblem:
    """The problem of two operators in a row that mean nothing together."""
    return QueryProblem(
        f"{first} {second}: two operators in a row",
        "write a OR b, a NOT b or a -b; operators are in capitals, lowercase and/or/not are words",
    )


def _exclusion_problems(query: Query) -> list[QueryProblem]:
    """The problems of exclusions with nothing to leave them out of."""
    if not query.groups:
        return []
    if not query.wanted().groups:
        return [
            QueryProblem(
                "a query of only exclusions is not supported",
                "add a word to search for, e.g. 'compose -docker' (no index can list what lacks "
                "a word cheaply); `hermes sessions list` shows recent sessions",
            )
        ]
    if any(all(t.negated for t in g) for g in query.groups):
        return [
            QueryProblem(
                "an alternative of OR only leaves words out",
                "exclusions apply to the whole query: write 'a b -c', not 'a OR -c'",
            )
        ]
    return []


def parse_query(text: str) -> Query:
    """Parse user text into a Query, applying the sanitizer's rules."""
    return _parse(text)[0]


def query_problem(text: str) -> QueryProblem | None:
    """Return why a strict reader refuses text (the first reason), or None when it does not.

    Refused: only exclusions, operators that dangle or come two in a row, unclosed quotes,
    and the syntax of other search languages this one does not honour (parentheses,
    NEAR(...), column filters such as role:, ^, a wildcard not at a word's end).
    """
    return next((p for p in _parse(text)[1] if p.refused), None)


def query_warnings(text: str) -> list[QueryProblem]:
    """Return what a search of text leaves out of it without refusing it (the caps)."""
    return [p for p in _parse(text)[1] if not p.refused]


def sanitize_fts5_query(text: str) -> str:
    """Turn any user text into a valid FTS5 query, or '' when nothing searchable is left."""
    groups = [list(g) for g in parse_query(text).groups]
    # SPEC §5: an operator word at either end dangles, in any case ("hello and" is hello).
    for end in (0, -1):
        while groups and _operator_word(groups[end][end]):
            groups[end].pop(end)
            if not groups[end]:
                groups.pop(end)
    # FTS5 has no unary NOT: a group of only exclusions searches its first term (a dangling NOT
    # is removed).
    kept = tuple(
        (replace(g[0], negated=False), *g[1:]) if all(t.negated for t in g) else tuple(g)
        for g in groups
    )
    return Query(kept).fts()


def _operator_word(term: Term) -> bool:
    """Tell whether a term is an operator's word written in lowercase (and, or, not)."""
    return not (term.phrase or term.prefix or term.negated) and term.text.upper() in _OPERATORS


def tame_prefixes(query: Query) -> Query:
    """Search a prefix shorter than MIN_PREFIX_CHARS as a word (th* matches most rows)."""
    return Query(
        tuple(
            tuple(
                replace(t, prefix=False) if t.prefix and len(t.text) < MIN_PREFIX_CHARS else t
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
    return sql, (pat, pat, pat, pat)


# Structured content is stored behind a NUL marker (content.STRUCTURED_SENTINEL), and LIKE
# stops reading text at a NUL: such content ("< ' '", a cheap comparison) is matched without
# its first byte. It costs a full scan 5-10 % more than LIKE alone.
_STRUCTURED_LIKE = (
    "(m.content < ' ' AND CAST(substr(CAST(m.content AS BLOB), 2) AS TEXT) LIKE ? ESCAPE '\\')"
)


def _group_like(terms: Sequence[Term]) -> tuple[str, tuple[Any, ...]]:
    """Compile one AND-group of wanted terms to a LIKE predicate."""
    parts: list[str] = []
    params: list[Any] = []
    for term in terms:
        sql, p = term_like(term)
        parts.append(sql)
        params.extend(p)
    return "(" + " AND ".join(parts) + ")", tuple(params)


def query_like(query: Query) -> tuple[str, tuple[Any, ...]]:
    """Compile the wanted terms to a LIKE predicate (OR of AND-groups); '0' if none is left.

    Exclusions are not part of it: a search checks them on every route with exclusion_sql.
    """
    groups = [_group_like(g) for g in query.wanted().groups]
    if not groups:
        return "0", ()
    return "(" + " OR ".join(sql for sql, _ in groups) + ")", tuple(
        p for _, params in groups for p in params
    )


# --- exclusions -----------------------------------------------------------------------------


def exclusion_sql(terms: Sequence[Term]) -> tuple[str, tuple[Any, ...]]:
    """SQL true when a message (alias m) contains none of the excluded terms ('1': no terms).

    A word or phrase is left out as the word index reads text: whole words, case and accents
    folded, ``build*`` any word starting with build (``-test`` keeps "latest"). CJK, written
    without spaces, is left out wherever it appears. Each is checked on the message's whole
    text, tool name and tool calls, on every route alike (the word index holds only the start
    of long tool output). Needs :func:`register_functions` on the connection.
    """
    parts: list[str] = []
    params: list[Any] = []
    for term in terms:
        sql, p = term_like(term) if cjk.cjk_runs(term.text) else _words_sql(term)
        parts.append(f"NOT {sql}")
        params.extend(p)
    return " AND ".join(parts) or "1", tuple(params)


_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")


def term_words(text: str) -> list[str]:
    """Return the words of a term's text, split and folded as the word index reads them."""
    return _WORD.findall(fold(text))


def _words_sql(term: Term) -> tuple[str, tuple[Any, ...]]:
    """SQL true when a message holds the words of a term (see exclusion_sql)."""
    words = term_words(term.text)
    if not words:
        return "0", ()
    parts: list[str] = []
    params: list[Any] = []
    for col in _COLUMNS:
        # ASCII text, the usual case, goes to Python (~7 us a row) only where LIKE (~0.5 us)
        # finds the first word; LIKE folds ASCII case only, so other text always goes. (In a
        # WHEN, unlike a THEN, SQLite stops at the first false operand of AND.)
        parts.append(
            f"(CASE WHEN {col} IS NULL THEN 0 "
            f"WHEN length(CAST({col} AS BLOB)) = length({col}) "
            f"AND NOT ({col} LIKE ? ESCAPE '\\') THEN 0 "
            f"ELSE {HAS_WORDS_FUNCTION}(?, ?, {col}) END)"
        )
        params.extend((like_pattern(words[0]), term.text, int(term.prefix)))
    return "(" + " OR ".join(parts) + ")", tuple(params)


# Combining marks NFD splits off accented letters; unicode61 (remove_diacritics) drops them.
_MARKS = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_WORD = re.compile(r"[^\W_]+")


def fold(text: str) -> str:
    """Fold text as FTS5's unicode61 tokenizer does before comparing words: case and accents."""
    if text.isascii():
        return text.lower()
    return _MARKS.sub("", unicodedata.normalize("NFD", text)).lower()


@functools.lru_cache(maxsize=256)
def _words_pattern(text: str, prefix: bool) -> re.Pattern[str] | None:
    """Compile the pattern of a term's words, in order, as whole words of folded text."""
    words = _WORD.findall(fold(text))
    if not words:
        return None
    body = r"[\W_]+".join(re.escape(w) for w in words)
    return re.compile(r"(?<![^\W_])" + body + ("" if prefix else r"(?![^\W_])"))


def has_words(text: object, prefix: object, *values: object) -> int:
    """Tell (1/0) whether any value holds text's words in order, as the word index reads them.

    Whole words, split and folded as unicode61 does; with prefix, the last one may go on.
    """
    if not isinstance(text, str):
        return 0
    pattern = _words_pattern(text, bool(prefix))
    if pattern is None:
        return 0
    for value in values:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, int | float):
            value = str(value)
        if not isinstance(value, str) or not value:
            continue
        if value.startswith(STRUCTURED_SENTINEL):
            value = content_text(value, sep=" ")  # the text of its parts, not its JSON keys
        if pattern.search(fold(value)):
            return 1
    return 0


def register_functions(conn: sqlite3.Connection) -> None:
    """Make the SQL functions exclusion_sql uses available on conn (once per connection)."""
    # Defining a function again expires every prepared statement of the connection, so each
    # search would parse and plan its statements anew: a cheap probe first.
    try:
        conn.execute(f"SELECT {HAS_WORDS_FUNCTION}('', 0)").fetchone()
        return
    except sqlite3.OperationalError:
        pass
    conn.create_function(HAS_WORDS_FUNCTION, -1, has_words, deterministic=True)
