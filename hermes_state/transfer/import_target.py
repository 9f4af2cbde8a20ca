"""Fitting exported sessions into the layout of the store they are imported into.

An export carries every column its source store had; the store it goes into may be another
release's (schema 22, 30 or 31) with fewer or other columns. What the target has no column for
is not written and counted; a null where the target's column is NOT NULL with a default gets
that default, counted; both are stated in the import summary. System prompts and tool pins go
where the target's own release keeps them: content-addressed in ``system_prompts`` (hashed
here, never trusted from the file) or inline in ``sessions.system_prompt``. Message row ids
are kept or given afresh by :mod:`hermes_state.transfer.import_ids`.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.store.sql import marks, quote

PROMPTS_TABLE = "system_prompts"
USAGE_TABLE = "session_model_usage"
# Session columns whose text the agent's newer layouts keep in PROMPTS_TABLE, by hash.
_ADDRESSED = {"system_prompt": "system_prompt_hash", "tool_names": "tool_names"}
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass
class Fitting:
    """What fitting records into the target changed: said in the import's summary."""

    dropped: Counter[str] = field(default_factory=Counter)  # "table.column" -> values not kept
    defaults: Counter[str] = field(default_factory=Counter)  # "table.column" -> nulls defaulted
    kept_ids: int = 0
    renumbered: int = 0
    usage_rows: int = 0
    prompts: int = 0
    already_there: int = 0  # messages of change-feed records the session had already
    retitled: list[tuple[str, str, str]] = field(default_factory=list)  # (id, title, new one)

    def add(self, other: Fitting) -> None:
        """Count another transaction's changes in too (one that committed)."""
        self.dropped.update(other.dropped)
        self.defaults.update(other.defaults)
        self.kept_ids += other.kept_ids
        self.renumbered += other.renumbered
        self.usage_rows += other.usage_rows
        self.prompts += other.prompts
        self.already_there += other.already_there
        self.retitled += other.retitled

    def notes(self) -> list[str]:
        """Say in sentences what the target's layout could not hold as it came."""
        out = []
        if self.dropped:
            out.append(
                "this store's layout has no column for these fields, so their values were not "
                "imported: " + _counted(self.dropped)
            )
        if self.defaults:
            out.append(
                "these fields were null in the file where this store's layout needs a value; "
                "they got the store's default: " + _counted(self.defaults)
            )
        if self.renumbered:
            out.append(
                f"{self.renumbered} message(s) got new ids, above every id this profile's "
                "stores and the file use (a message keeps its id only when it is above every "
                f"id the profile has used); {self.kept_ids} kept their ids"
            )
        if self.retitled:
            shown = "; ".join(f"{old!r} -> {new!r}" for _sid, old, new in self.retitled[:5])
            more = f"; and {len(self.retitled) - 5} more" if len(self.retitled) > 5 else ""
            out.append(
                f"{len(self.retitled)} title(s) were already used here by other sessions, so "
                f"they were imported numbered: {shown}{more}"
            )
        return out


def _holds_something(value: Any) -> bool:
    """Tell whether a value not written loses anything (null, 0, "" and [] do not)."""
    return value not in (None, 0, "", "[]", "{}") and value != [] and value != {}


def _counted(counts: Counter[str]) -> str:
    return ", ".join(f"{name} ({n})" for name, n in sorted(counts.items()))


def prompt_hash(text: str) -> str:
    """Return the content address the agent gives a prompt (sha256 of its UTF-8 text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _not_null_defaults(conn: sqlite3.Connection, table: str) -> frozenset[str]:
    """Return the columns of table that are NOT NULL and have a default."""
    rows = conn.execute(f"PRAGMA table_info({quote(table)})").fetchall()
    return frozenset(r[1] for r in rows if r[3] and r[4] is not None)


class Target:
    """The layout of the store an import writes into, read once per import."""

    def __init__(self, store: Store) -> None:
        conn = store.conn
        self.store = store
        self.session_columns = frozenset(store.columns("sessions"))
        self.message_columns = frozenset(store.columns("messages"))
        self.usage_columns = frozenset(store.columns(USAGE_TABLE))
        self.session_defaults = _not_null_defaults(conn, "sessions")
        self.usage_defaults = _not_null_defaults(conn, USAGE_TABLE) if self.usage_columns else None
        self.addressed = store.has_table(PROMPTS_TABLE)

    # --- sessions ---------------------------------------------------------------------------

    def session_row(
        self, conn: sqlite3.Connection, session: Mapping[str, Any], fitting: Fitting
    ) -> dict[str, Any]:
        """Return the session's columns as this layout stores them (prompts placed, defaults)."""
        row = dict(session)
        row.pop("model_usage", None)
        row.pop("messages_after_id", None)
        row.pop("vault", None)  # the export's mark of where a session lived, not a column
        self._place_prompts(conn, row, fitting)
        out: dict[str, Any] = {}
        for key, value in row.items():
            if key not in self.session_columns:
                if _holds_something(value):
                    fitting.dropped[f"sessions.{key}"] += 1
                continue
            if value is None and key in self.session_defaults:
                fitting.defaults[f"sessions.{key}"] += 1
                continue  # the column's default applies
            out[key] = value
        return out

    def _place_prompts(
        self, conn: sqlite3.Connection, row: dict[str, Any], fitting: Fitting
    ) -> None:
        """Put the prompt texts where this layout's release keeps them."""
        given_hash = row.pop("system_prompt_hash", None)
        prompt = row.get("system_prompt")
        if self.addressed and "system_prompt_hash" in self.session_columns:
            if isinstance(prompt, str):
                row["system_prompt_hash"] = self._address(conn, prompt, fitting)
                row["system_prompt"] = None
            elif isinstance(given_hash, str) and self._has_prompt(conn, given_hash):
                row["system_prompt_hash"] = given_hash  # the text is here already
            elif given_hash is not None:
                fitting.dropped["sessions.system_prompt_hash (no prompt text in the file)"] += 1
        elif given_hash is not None and prompt is None:
            fitting.dropped["sessions.system_prompt_hash (no prompt text in the file)"] += 1
        pin = row.get("tool_names")
        if self.addressed and isinstance(pin, str) and not _HASH.fullmatch(pin):
            row["tool_names"] = self._address(conn, pin, fitting)

    def _address(self, conn: sqlite3.Connection, text: str, fitting: Fitting) -> str:
        """Store a text in the prompts table (once per content); return its hash."""
        digest = prompt_hash(text)
        cur = conn.execute(
            f"INSERT OR IGNORE INTO {PROMPTS_TABLE} (hash, prompt) VALUES (?, ?)", (digest, text)
        )
        fitting.prompts += cur.rowcount
        return digest

    @staticmethod
    def _has_prompt(conn: sqlite3.Connection, digest: str) -> bool:
        found = conn.execute(f"SELECT 1 FROM {PROMPTS_TABLE} WHERE hash = ?", (digest,))
        return found.fetchone() is not None

    # --- messages ---------------------------------------------------------------------------

    def count_dropped_fields(self, msgs: Sequence[Mapping[str, Any]], fitting: Fitting) -> None:
        """Count message values this layout has no column for (they are not written)."""
        # Usually every key has a column: one set operation per session tells so.
        if not set().union(*msgs).difference(self.message_columns):
            return
        for msg in msgs:
            for key, value in msg.items():
                if key not in self.message_columns and _holds_something(value):
                    fitting.dropped[f"messages.{key}"] += 1

    # --- usage ------------------------------------------------------------------------------

    def write_usage(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        rows: Sequence[Mapping[str, Any]],
        fitting: Fitting,
    ) -> None:
        """Write a session's per-model usage rows (the caller removed any old ones)."""
        if not rows:
            return
        if not self.usage_columns:
            fitting.dropped[f"{USAGE_TABLE} rows"] += len(rows)
            return
        defaults = self.usage_defaults or frozenset()
        for raw in rows:
            row: dict[str, Any] = {"session_id": session_id}
            for key, value in raw.items():
                if key == "session_id":
                    continue
                if key not in self.usage_columns:
                    if _holds_something(value):
                        fitting.dropped[f"{USAGE_TABLE}.{key}"] += 1
                    continue
                if value is None and key in defaults:
                    fitting.defaults[f"{USAGE_TABLE}.{key}"] += 1
                    continue
                row[key] = value
            cols = ", ".join(quote(c) for c in row)
            conn.execute(
                f"INSERT INTO {USAGE_TABLE} ({cols}) VALUES ({marks(len(row))})", list(row.values())
            )
            fitting.usage_rows += 1
