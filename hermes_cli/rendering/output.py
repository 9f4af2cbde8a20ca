"""Where a command's output goes and in what form: a layout for people, or json/jsonl/csv/tsv.

Three independent decisions, made once per command:
- format: `table` (the human layout) or a machine format (`--format`, `--json`);
- layout: a terminal on stdout gets a layout fitted to its width, relative times and (for long
  output) a pager; anything else gets the same layout untruncated, with absolute times;
- colour: `--color auto|always|never`; in auto, FORCE_COLOR forces it (FORCE_COLOR=0 forbids it),
  then NO_COLOR or TERM=dumb remove it, else a terminal gets it. Colour never changes the layout.

Machine formats carry the data exactly. JSON escapes every control character, and this module
also escapes C1 controls, bidi controls and line separators as \\uXXXX (the parsed value is the
same), so a document printed to a terminal cannot drive it. CSV/TSV cannot escape, so on a
terminal their cells pass through the sanitiser; written to a pipe or file they are exact.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from hermes_cli.rendering import sanitize


class Format(StrEnum):
    """Output formats of the read commands."""

    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    tsv = "tsv"


class ColorMode(StrEnum):
    """When to colour human output."""

    auto = "auto"
    always = "always"
    never = "never"


@dataclass(frozen=True)
class Settings:
    """How this command prints: format, colour, whether stdout is a terminal, its width."""

    format: Format = Format.table
    color: bool = False
    terminal: bool = False  # stdout is a terminal: fit its width, relative times, pager allowed
    width: int | None = None  # terminal columns; None = unbounded (a pipe or a file)
    height: int | None = None
    pager: bool = False  # long output may go through the pager

    @property
    def machine(self) -> bool:
        """Whether the format is for programs (everything but the table layout)."""
        return self.format is not Format.table


_current: Settings | None = None


def isatty(stream: Any) -> bool:
    """Tell whether a stream is a terminal (False for anything that cannot say)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def color_wanted(mode: ColorMode = ColorMode.auto, stream: Any = None) -> bool:
    """Decide colour: --color, then FORCE_COLOR, NO_COLOR, TERM=dumb, then: is it a terminal."""
    if mode is ColorMode.never:
        return False
    if mode is ColorMode.always:
        return True
    force = os.environ.get("FORCE_COLOR")
    if force:
        return force.lower() not in ("0", "false", "no")
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return isatty(sys.stdout if stream is None else stream)


def detect(
    fmt: Format = Format.table,
    color: ColorMode = ColorMode.auto,
    *,
    pager: bool = False,
) -> Settings:
    """Work out the settings for stdout as it is now."""
    terminal = isatty(sys.stdout)
    width = height = None
    if terminal:
        size = shutil.get_terminal_size((80, 24))  # honours COLUMNS/LINES, like most tools
        width, height = max(20, size.columns), max(2, size.lines)
    human = fmt is Format.table
    return Settings(
        format=fmt,
        color=human and color_wanted(color),
        terminal=terminal,
        width=width,
        height=height,
        pager=human and terminal and pager,
    )


def configure(
    fmt: Format | None = None,
    *,
    as_json: bool = False,
    color: ColorMode = ColorMode.auto,
    pager: bool = False,
) -> Settings:
    """Set this command's output settings (`--json` means `--format json`); return them."""
    global _current
    chosen = Format.json if as_json else (fmt or Format.table)
    _current = detect(chosen, color, pager=pager)
    return _current


def current() -> Settings:
    """Return this command's settings (detected from stdout when the command set none)."""
    return _current if _current is not None else detect()


def reset() -> None:
    """Forget the settings of the last command (the app runs many commands in one test process)."""
    global _current
    _current = None


# --- colour ---------------------------------------------------------------------------------

# SGR codes by role, so every command colours the same thing the same way.
STYLES = {
    "id": "36",
    "title": "1",
    "header": "1",
    "heading": "1;4",
    "dim": "2",
    "match": "1;7;33",
    "user": "1;32",
    "assistant": "1;34",
    "tool": "1;35",
    "system": "1;33",
    "warn": "33",
}


def paint(text: str, style: str | None, settings: Settings | None = None) -> str:
    """Wrap already-safe text in the colour of a style, when colour is on."""
    if not style or not text:
        return text
    if not (settings or current()).color:
        return text
    return f"\x1b[{STYLES.get(style, style)}m{text}\x1b[0m"


# --- machine formats ------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# Characters json.dumps(ensure_ascii=False) leaves raw that a terminal may act on or that cannot
# be written as UTF-8; outside strings JSON is ASCII, so each one sits inside a string literal.
_JSON_RAW_UNSAFE = re.compile(
    "[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]"
)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(data: Any, *, indent: int | None = None) -> str:
    """Return data as JSON text, exact and safe to print on a terminal."""
    text = json.dumps(data, ensure_ascii=False, indent=indent, default=_json_default)
    return _JSON_RAW_UNSAFE.sub(_json_escape, text)


def emit_json(data: Any) -> None:
    """Print data as indented JSON on stdout, and nothing else."""
    sys.stdout.write(dumps(data, indent=2) + "\n")


def emit_json_stream(head: Mapping[str, Any], key: str, items: Iterable[Any]) -> None:
    """Print head plus key: [items...] as indented JSON, writing items as they come."""
    write = sys.stdout.write
    text = dumps(dict(head), indent=2)
    write(text[: -len("\n}")] + ",\n" if head else "{\n")
    write(f"  {dumps(key)}: [")
    first = True
    for item in items:
        body = dumps(item, indent=2).replace("\n", "\n    ")
        write(("\n    " if first else ",\n    ") + body)
        first = False
    write("]\n}\n" if first else "\n  ]\n}\n")


class _TerminalSafe:
    """A text stream that escapes what a terminal could act on (see terminal_safe)."""

    def __init__(self, stream: Any, markdown: bool) -> None:
        self._stream = stream
        self._markdown = markdown

    def write(self, text: str) -> int:
        """Write text with terminal controls escaped."""
        if self._markdown:
            safe = sanitize.multiline(text)
        else:
            safe = _JSON_RAW_UNSAFE.sub(_json_escape, text)
        self._stream.write(safe)
        return len(text)

    def flush(self) -> None:
        """Flush the underlying stream."""
        self._stream.flush()


def terminal_safe(stream: Any, *, markdown: bool = False) -> Any:
    """Return stream, or on a terminal a wrapper that escapes controls in what is written.

    JSON written through it stays exact (C1 and bidi controls become \\u escapes inside
    strings); Markdown is sanitised like any human output. Files and pipes get the raw bytes.
    """
    return _TerminalSafe(stream, markdown) if isatty(stream) else stream


def emit_jsonl(rows: Iterable[Any]) -> None:
    """Print one compact JSON document per line."""
    write = sys.stdout.write
    for row in rows:
        write(dumps(row) + "\n")


def cell(value: Any) -> str:
    """Return a value as a CSV/TSV cell: '' for null, true/false, nested values as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    return str(value)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_field(text: str) -> str:
    """Return a TSV field: backslash, tab, newline and CR written as \\\\, \\t, \\n, \\r."""
    return text.translate(_TSV_ESCAPES)


def tsv_unescape(field: str) -> str:
    """Return the text a TSV field stands for (the inverse of tsv_field)."""
    return re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n", "r": "\r"}.get(m[1], m[1]), field)


def emit_delimited(rows: Iterable[Mapping[str, Any]], keys: Sequence[str], fmt: Format) -> None:
    """Print rows with a header line: CSV quoted as RFC 4180, TSV one record per line."""
    # A person reading CSV/TSV on a terminal gets the same protection as from a table.
    safe = sanitize.multiline if isatty(sys.stdout) else str
    if fmt is Format.tsv:
        write = sys.stdout.write
        write("\t".join(keys) + "\n")
        for row in rows:
            write("\t".join(safe(tsv_field(cell(row.get(k)))) for k in keys) + "\n")
        return
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(keys)
    for row in rows:
        writer.writerow([safe(cell(row.get(k))) for k in keys])


def emit(
    settings: Settings,
    document: Any,
    rows: Iterable[Mapping[str, Any]],
    keys: Sequence[str],
) -> bool:
    """Print the machine format settings ask for; return False when the table layout is wanted.

    document is the --json form; rows (each with the given keys) are what --format jsonl, csv
    and tsv print, one per line.
    """
    fmt = settings.format
    if fmt is Format.table:
        return False
    if fmt is Format.json:
        emit_json(document)
    elif fmt is Format.jsonl:
        emit_jsonl(rows)
    else:
        emit_delimited(rows, keys, fmt)
    return True
