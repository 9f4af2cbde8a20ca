"""FTS5's BM25 recomputed with the statistics of several stores together (a spanning search).

FTS5's ``rank`` of each store uses that store's own row count, average length and per-phrase
document counts, so it is recomputed here with FTS5's own formula (``fts5_aux.c``,
``fts5Bm25Function``)::

    score = sum over phrases p:  idf(p) * f(p) * (k1 + 1) / (f(p) + k1 * (1 - b + b * D / avgdl))
    idf(p) = log((N - n(p) + 0.5) / (n(p) + 0.5)), at least 1e-6;  rank = -score

with k1 = 1.2 and b = 0.75; N and the token total (avgdl = tokens / N) summed from each table's
averages record (``<fts>_data`` rowid 1: varints, the row count, then each column's token
total), n(p) the rows matching the phrase alone (FTS5's own xQueryPhrase count: a single word,
a phrase or a prefix), D the row's tokens in every column (``<fts>_docsize``) and f(p) the
row's instances of the phrase (FTS5 counts the instances of a phrase in a row only when the
phrase's AND-group matches that row). f(p) is read back from FTS5 itself: the BM25 of the
phrase alone over the candidate rows, solved for f with that store's statistics (exact: f is a
whole number). One store holding everything gives the same scores, to rounding.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from hermes_state.store.sql import quote

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6
_AVERAGES_ROWID = 1  # FTS5_AVERAGES_ROWID


# --- FTS5 statistics ------------------------------------------------------------------------


def varints(blob: bytes) -> list[int]:
    """Decode a run of SQLite varints (FTS5 stores its counters in this format)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for k in range(9):
            if i >= n:
                return out  # a truncated record: what was whole
            byte = blob[i]
            i += 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def table_totals(conn: sqlite3.Connection, table: str) -> tuple[int, int]:
    """Return an FTS5 table's (row count, token count over every column) from its averages
    record; (0, 0) when it has none."""
    row = conn.execute(
        f"SELECT block FROM {quote(table + '_data')} WHERE id = ?", (_AVERAGES_ROWID,)
    ).fetchone()
    if row is None or not isinstance(row[0], bytes):
        return 0, 0
    values = varints(row[0])
    return (values[0], sum(values[1:])) if values else (0, 0)


def doc_lengths(conn: sqlite3.Connection, table: str, ids: Sequence[int]) -> dict[int, int]:
    """Return each row's token count over every column, from the table's docsize records."""
    out: dict[int, int] = {}
    for rid, size in conn.execute(
        f"SELECT id, sz FROM {quote(table + '_docsize')} "
        "WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    ):
        if not isinstance(size, bytes):
            out[int(rid)] = 0
        elif max(size, default=0) < 0x80:
            out[int(rid)] = sum(size)  # every column under 128 tokens: one byte each
        else:
            out[int(rid)] = sum(varints(size))
    return out


def phrase_groups(match: str) -> list[list[str]]:
    """Split an FTS5 query of bare or quoted phrases (``a "b c" d* OR e``) into its OR-groups
    of phrases, in FTS5's phrase order."""
    groups: list[list[str]] = [[]]
    i, n = 0, len(match)
    while i < n:
        if match[i].isspace():
            i += 1
            continue
        start = i
        if match[i] == '"':
            i += 1
            while i < n:
                if match[i] == '"':
                    if i + 1 < n and match[i + 1] == '"':
                        i += 2
                        continue
                    i += 1
                    break
                i += 1
        else:
            while i < n and not match[i].isspace():
                i += 1
        while i < n and match[i] == "*":
            i += 1
        token = match[start:i]
        if token == "OR":
            groups.append([])
        elif token != "AND":
            groups[-1].append(token)
    return [g for g in groups if g]


def _starts(groups: Sequence[Sequence[str]]) -> list[int]:
    """Return the index of each group's first phrase in the flat phrase list."""
    out, at = [], 0
    for g in groups:
        out.append(at)
        at += len(g)
    return out


def idf(rows: int, hits: int) -> float:
    """Return FTS5's IDF of a phrase found in hits of rows."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5)) if rows else 0.0
    return value if value > 0.0 else MIN_IDF


def bm25(idfs: Sequence[float], freqs: Sequence[float], length: float, avgdl: float) -> float:
    """Return FTS5's bm25() of one row (negative: lower is better), in FTS5's own arithmetic."""
    score = 0.0
    for weight, f in zip(idfs, freqs, strict=True):
        score += weight * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * length / avgdl)))
    return -1.0 * score


@dataclass
class _TableStats:
    """One FTS table's statistics in one store, and what its candidate rows hold."""

    rows: int
    tokens: int
    hits: list[int]  # rows matching each phrase alone


def _phrase_hits(conn: sqlite3.Connection, table: str, phrases: Sequence[str]) -> list[int]:
    """Count the rows matching each phrase alone (FTS5's n(q), as xQueryPhrase counts it)."""
    return [
        int(
            conn.execute(
                f"SELECT count(*) FROM {quote(table)} WHERE {quote(table)} MATCH ?", (p,)
            ).fetchone()[0]
        )
        for p in phrases
    ]


def _freqs(
    conn: sqlite3.Connection,
    table: str,
    groups: Sequence[Sequence[str]],
    stats: _TableStats,
    ids: Sequence[int],
    lengths: dict[int, int],
    local_ranks: dict[int, float],
) -> dict[int, list[float]]:
    """Return each candidate row's instances of every phrase (0 where it has none), read back
    from FTS5's bm25 with this store's statistics: of each phrase alone over the candidates,
    and, for one phrase alone in its OR-group, of the whole query (the walk's rank)."""
    phrases = [p for g in groups for p in g]
    out = {i: [0.0] * len(phrases) for i in ids}
    if not ids or not stats.rows:
        return out
    avgdl = stats.tokens / stats.rows
    weights = [idf(stats.rows, h) for h in stats.hits]
    dls = {i: K1 * (1 - B + B * lengths.get(i, 0) / avgdl) for i in ids}

    def solve(rid: int, k: int, score: float) -> None:
        # FTS5's formula solved for f (a whole number, so rounded).
        q = score / weights[k]
        denominator = (K1 + 1.0) - q
        if denominator > 0:
            out[rid][k] = float(round(q * dls[rid] / denominator))

    # The whole query's score less the other phrases' parts is one phrase's part, when that
    # phrase counts exactly where it occurs: the only phrase of its OR-group, or any phrase of
    # the only group (every phrase is in every match). The one this store has most often: its
    # statement would read the longest list (f stays exact: the residual's error is far below
    # a half even at the least IDF).
    spans = [(a, a + len(g)) for a, g in zip(_starts(groups), groups, strict=True)]
    last = -1
    if all(i in local_ranks for i in ids):
        able = [k for a, z in spans for k in range(a, z) if len(spans) == 1 or z - a == 1]
        last = max(able, key=lambda k: (stats.hits[k], weights[k]), default=-1)
    others = [k for k in range(len(phrases)) if k != last]
    if others:
        wanted = json.dumps(sorted(ids))
        low, high = min(ids), max(ids)
    for k in others:
        # The rowid range is served by FTS5; "+rowid IN" is checked per row (see search).
        for rid, score in conn.execute(
            f"SELECT rowid, bm25({quote(table)}) FROM {quote(table)} "
            f"WHERE {quote(table)} MATCH ? AND rowid BETWEEN ? AND ? "
            "AND +rowid IN (SELECT value FROM json_each(?))",
            (phrases[k], low, high, wanted),
        ):
            solve(rid, k, -float(score))
    if last >= 0:
        rest_spans = [(a, z) for a, z in spans if not a <= last < z]
        for i in ids:
            f, dl = out[i], dls[i]
            # A phrase counts in a row only when its whole AND-group matches there.
            counted = (
                others
                if len(spans) == 1
                else [k for a, z in rest_spans if all(f[a:z]) for k in range(a, z)]
            )
            rest = sum(weights[k] * ((f[k] * (K1 + 1.0)) / (f[k] + dl)) for k in counted)
            solve(i, last, -local_ranks[i] - rest)
    return out
