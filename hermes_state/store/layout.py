"""What a store is: which release's schema it carries, whether this package's additions are in
place, and what writing to it would need (SPEC §19).

``inspect(conn)`` reads the schema table, the version and a few state_meta keys (read-only safe,
one pass) and returns a :class:`Layout`. Its ``kind`` tells the rest of the package how to treat
the store:

- ``current``: schema 31 with this package's additions (what ``db migrate`` or an agent-role open
  leaves, and what a new store gets);
- ``upstream``: a schema a known Hermes Agent release family wrote (:mod:`releases`: 11 … 31),
  untouched by us; writable in its own layout (a command that needs a column the layout lacks
  refuses, naming it);
- ``legacy``: the layout this package wrote before SPEC §19 (its own FTS objects under the
  agent's names); searchable, but the agent cannot write to it until ``hermes db migrate``;
- ``old``: a schema number below 31 that no known release writes (27, or below 11): browsable
  with a note naming the nearest family; every command's write (``db migrate`` included)
  refuses it, naming the number; the agent's own open (SessionDB) upgrades it, as every
  release upgrades an older store;
- ``unknown``: a schema number above 31 (never seen): browse only;
- ``not_hermes``: an SQLite file without a Hermes schema (another application's database).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Literal

from hermes_state.store import cjk, fts, meta, releases, schema, triggers

Kind = Literal["current", "upstream", "legacy", "old", "unknown", "not_hermes"]

_LEGACY_MARKERS = frozenset(
    (*fts.LEGACY_TRIGGERS, *cjk.LEGACY_TRIGGERS, *cjk.LEGACY_TABLES, *schema.LEGACY_INDEXES)
)


@dataclass(frozen=True)
class Layout:
    """The shape of one store, as far as coexistence with the agent is concerned."""

    version: int | None
    additions: int | None  # version of this package's additions (None: not installed)
    fts: fts.Flavor | None  # the word/substring layout (None: the store has none)
    fts_stale: bool = False  # the agent detached its indexes (fts_stale): a rebuild is due
    objects: frozenset[str] = field(default_factory=frozenset, repr=False)
    tables: frozenset[str] = field(default_factory=frozenset, repr=False)
    # The agent's text-checked triggers (uid, display) are all there with the agent's exact text.
    triggers_settled: bool = True
    version_text: str | None = None  # what schema_version holds, as text (for messages)

    @property
    def known(self) -> bool:
        """Tell whether a release this code knows writes this schema version."""
        return releases.family(self.version) is not None

    @property
    def family(self) -> releases.Family | None:
        """Return the release family that writes this schema number (None: no known one)."""
        return releases.family(self.version)

    @property
    def old(self) -> bool:
        """Tell whether the store is at a schema below the newest no known release writes."""
        return (
            self.version is not None
            and 0 < self.version < schema.SCHEMA_VERSION
            and releases.family(self.version) is None
        )

    def nearest_note(self) -> str | None:
        """Name the nearest family of a schema number no known release writes (None: known)."""
        if self.version is None or self.known or self.version <= 0:
            return None
        return releases.describe_unknown(self.version)

    @property
    def too_new(self) -> bool:
        """Tell whether the store is newer than this code."""
        return self.version is not None and self.version > schema.SCHEMA_VERSION

    @property
    def legacy(self) -> bool:
        """Tell whether the store carries objects of this package's layout before SPEC §19."""
        return bool(self.objects & _LEGACY_MARKERS) or self.fts == "legacy"

    @property
    def fts_complete(self) -> bool:
        """Tell whether an external layout has every object (a missing trigger loses rows)."""
        return self.fts != "external" or set(fts.EXTERNAL_DDL) <= self.objects

    @property
    def has_uid_trigger(self) -> bool:
        """Tell whether schema 31's message_uid trigger is in place."""
        return triggers.UID_TRIGGER in self.objects

    @property
    def kind(self) -> Kind:
        """Classify the store (see the module docstring)."""
        if self.version is None or not {"sessions", "messages"} <= self.tables:
            return "not_hermes"
        if self.old:
            return "old"
        if not self.known:
            return "unknown"
        if self.legacy:
            return "legacy"
        if (
            self.version == schema.SCHEMA_VERSION
            and self.additions == schema.ADDITIONS_VERSION
            and self.has_uid_trigger
            and self.triggers_settled
            and self.fts is not None
            and self.fts_complete
            and not self.fts_stale
        ):
            return "current"
        return "upstream"

    @property
    def writable_in_place(self) -> bool:
        """Tell whether the CLI's edit commands may write to it as it is (SPEC §19.4)."""
        return self.kind in ("current", "upstream")

    def describe(self) -> str:
        """Say in words what the store is."""
        kind = self.kind
        fam = self.family
        release = fam.name if fam is not None else ""
        fts_words = {
            "external": "external-content search indexes",
            "inline": "inline search indexes",
            "legacy": "this tool's pre-0.2 search indexes",
            "foreign": "search indexes of an unknown shape",
            None: "no search indexes",
        }[self.fts]
        if kind == "not_hermes":
            return "not a Hermes session store (no sessions/messages schema)"
        if kind == "old":
            return (
                f"schema {self.version}: {self.nearest_note()}; browse only (an agent "
                "release upgrades it when it starts)"
            )
        if kind == "unknown":
            when = "newer than" if self.too_new else "not one of"
            near = self.nearest_note()
            return (
                f"{schema.shown_version(self.version_text)}, {when} the versions this hermes "
                f"knows ({releases.known_list()})" + (f"; {near}" if near else "") + ": browse only"
            )
        if kind == "legacy":
            return (
                f"schema {self.version} in the layout older hermes-state versions wrote "
                "(the agent cannot write to it): run `hermes db migrate`"
            )
        if kind == "current":
            return f"{release} with hermes additions v{self.additions}"
        extra = f", hermes additions v{self.additions}" if self.additions is not None else ""
        return f"healthy upstream layout: {release}, {fts_words}{extra}"


def inspect(conn: sqlite3.Connection) -> Layout:
    """Read the store's layout (read-only safe)."""
    rows = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
    objects = frozenset(r[1] for r in rows)
    tables = frozenset(r[1] for r in rows if r[0] == "table")
    version = schema.stored_version(conn) if "schema_version" in tables else None
    version_text = schema.stored_version_text(conn) if "schema_version" in tables else None
    additions = meta.get_int(conn, schema.ADDITIONS_KEY) if "state_meta" in tables else None
    flavor = fts.layout_of(conn) if "messages" in tables else None
    stale = "state_meta" in tables and meta.get(conn, fts.STALE_KEY) is not None
    # Read as bytes: a damaged schema can hold text that is not UTF-8.
    checked_raw = dict(
        conn.execute(
            "SELECT name, CAST(sql AS BLOB) FROM sqlite_master WHERE type = 'trigger' AND name IN "
            f"({', '.join('?' * len(triggers.CHECKED_TRIGGER_DDL))})",
            tuple(triggers.CHECKED_TRIGGER_DDL),
        ).fetchall()
    )
    checked = {
        name: bytes(sql or b"").decode("utf-8", "replace") for name, sql in checked_raw.items()
    }
    return Layout(
        version=version,
        additions=additions,
        fts=flavor,
        fts_stale=stale,
        objects=objects,
        tables=tables,
        triggers_settled=checked == triggers.CHECKED_TRIGGER_DDL,
        version_text=version_text,
    )
