"""Fitting text to a terminal: display widths, cutting, wrapping, and tables that give way in order.

A table column is either *whole* (ids, numbers, times: never cut) or *shrinkable* (titles,
models, commands: cut with an ellipsis, down to a minimum width). When a terminal is too narrow,
the shrinkable columns shrink first; if that is not enough, whole columns are dropped one at a time
in the table's documented drop order (its `drop` ranks, lowest first), and a footnote names what
was left out. A column without a drop rank (a session id) is never dropped. Without a width (a
pipe or a file) every column is printed whole.

Cells reach this module already made safe by `hermes_cli.rendering.sanitize` (the table does it
itself);
colour is added after measuring, so it never changes the layout.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hermes_cli.rendering import output, sanitize

ELLIPSIS = "…"
GAP = "  "
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def char_width(ch: str) -> int:
    """Return how many terminal cells one character takes (0 for combining, 2 for wide)."""
    if ch < "\u0300":  # ASCII and Latin: the common case
        return 1
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def display_width(text: str) -> int:
    """Return how many terminal cells text takes (wide CJK characters count two)."""
    if text.isascii():
        return len(text)
    return sum(char_width(ch) for ch in text)


def visible_width(text: str) -> int:
    """Return the display width of text that may hold our own colour codes."""
    return display_width(_SGR.sub("", text)) if "\x1b" in text else display_width(text)


# The parts of a label that tell rows apart, kept whole when the rest is cut: the `#2` of a
# continuation's title and the `[vault 2025]` mark before a vaulted session's title.
_LEAD_MARK = re.compile(r"^\[vault [^\]]{1,12}\] ")
_TAIL_MARK = re.compile(r" #\d{1,6}$")


def truncate(text: str | None, width: int | None) -> str:
    """Cut one-line text to at most width cells, ending with an ellipsis when cut (None: whole).

    A leading `[vault 2025] ` and a trailing ` #2` stay whole when there is room for them and a
    little of the rest: the middle is cut (`[vault 2025] Refactor sea… #2`).
    """
    flat = " ".join(str(text or "").split())
    if width is None or display_width(flat) <= width:
        return flat
    if width <= 0:
        return ""
    lead = _LEAD_MARK.match(flat)
    tail = _TAIL_MARK.search(flat)
    head_text = lead.group(0) if lead else ""
    tail_text = tail.group(0) if tail else ""
    if head_text or tail_text:
        middle = flat[len(head_text) : len(flat) - len(tail_text)]
        room = width - display_width(head_text) - display_width(tail_text)
        if room >= 4 and middle:
            return head_text + _cut(middle, room) + tail_text
        if head_text and display_width(head_text.strip()) <= width:
            return head_text.strip()  # no room for the title: the mark says where it lives
    return _cut(flat, width)


def _cut(flat: str, width: int) -> str:
    """Cut text that is wider than width to width cells, the last one an ellipsis."""
    if display_width(flat) <= width:
        return flat
    out, used = [], 0
    for ch in flat:
        w = char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def pad(text: str, width: int, justify: str = "left") -> str:
    """Pad text with spaces to width cells, on the right (left-justified) or the left."""
    gap = " " * max(0, width - display_width(text))
    return gap + text if justify == "right" else text + gap


# --- wrapping -------------------------------------------------------------------------------

Piece = tuple[str, str | None]  # (text, style)
_ATOM = re.compile(r"(?:>>>)?.(?:<<<)?", re.DOTALL)  # a character with the match marks on it
_MATCH_ATOM = re.compile(r">>>.+?<<<|.", re.DOTALL)  # a whole marked match, or one character


def wrap_text(text: str, width: int | None, *, break_words: bool = True) -> list[str]:
    """Return one line of plain text as lines of at most width cells (whole when width is None).

    Without break_words a word wider than the line (a path, a URL) keeps a line of its own,
    whole, so it can still be copied.
    """
    if width is None or display_width(text) <= width:
        return [text]
    if break_words:
        return ["".join(t for t, _ in line) for line in wrap_pieces([(text, None)], width)]
    body = text.lstrip(" ")
    indent = text[: len(text) - len(body)]  # continuation lines keep the line's indentation
    lines: list[str] = []
    for word in body.split(" "):
        if lines and display_width(lines[-1]) + 1 + display_width(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(indent + word)
    return lines


def wrap_pieces(pieces: Sequence[Piece], width: int) -> list[list[Piece]]:
    """Wrap styled one-line text to lines of at most width cells, breaking at spaces if it can."""
    width = max(1, width)
    words: list[list[Piece]] = []  # each word: its styled fragments, then one space after it
    current: list[Piece] = []
    for text, style in pieces:
        for i, part in enumerate(text.split(" ")):
            if i:
                words.append(current)
                current = []
            if part:
                current.append((part, style))
    words.append(current)
    lines: list[list[Piece]] = [[]]
    used = 0
    for word in words:
        size = sum(display_width(t) for t, _ in word)
        if used and used + 1 + size > width:
            lines.append([])
            used = 0
        elif used:
            # A space inside a run of one style keeps that style (one colour span, not many).
            before = lines[-1][-1][1] if lines[-1] else None
            lines[-1].append((" ", before if word and word[0][1] == before else None))
            used += 1
        if size <= width - used:
            lines[-1].extend(word)
            used += size
            continue
        for text, style in word:  # a word longer than the line: break it by cells
            # A marked match stays on one line when it fits one; else its marks stay whole and
            # with the character they mark (`>>>会`, `議<<<`).
            atoms = [
                part
                for whole in _MATCH_ATOM.findall(text)
                for part in ([whole] if display_width(whole) <= width else _ATOM.findall(whole))
            ]
            for ch in atoms:
                w = display_width(ch)
                if used + w > width and used:
                    lines.append([])
                    used = 0
                lines[-1].append((ch, style))
                used += w
    return [_merge(line) for line in lines]


def _merge(line: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for text, style in line:
        if merged and merged[-1][1] == style:
            merged[-1] = (merged[-1][0] + text, style)
        else:
            merged.append((text, style))
    return merged


def paint_pieces(pieces: Sequence[Piece], settings: output.Settings) -> str:
    """Join styled pieces into one string, coloured when the settings say so."""
    return "".join(output.paint(t, s, settings) for t, s in pieces)


# --- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: header, alignment, style, and how it gives way on a narrow terminal.

    shrink_to: None keeps the column whole (never cut); a number lets it be cut down to that
    many cells, and prefer is how wide it gets back first when there is room. drop: the order
    in which whole columns are left out when even the shrunken table is too wide (1 goes
    first); None means never dropped.
    """

    header: str
    justify: str = "left"
    style: str | None = None
    shrink_to: int | None = None
    prefer: int | None = None  # room a shrunken column gets back first, before any extra
    drop: int | None = None
    style_of: Callable[[str], str | None] | None = None  # per-cell style (e.g. by role)


@dataclass
class Fitted:
    """A table fitted to a width: the columns kept, their widths, and the headers left out."""

    columns: list[int]
    widths: list[int]
    dropped: list[str]


def fit(columns: Sequence[Column], natural: Sequence[int], width: int | None) -> Fitted:
    """Choose which columns to show and how wide, for a terminal width (None: all, whole)."""
    keep = list(range(len(columns)))
    if width is None:
        return Fitted(keep, list(natural), [])

    def floor(i: int) -> int:
        limit = columns[i].shrink_to
        return natural[i] if limit is None else min(natural[i], limit)

    def needed(indices: list[int]) -> int:
        return sum(floor(i) for i in indices) + len(GAP) * (len(indices) - 1)

    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None)
    dropped: list[int] = []
    while needed(keep) > width and droppable:
        _, i = droppable.pop(0)
        keep.remove(i)
        dropped.append(i)
    widths = {i: floor(i) for i in keep}
    spare = width - needed(keep)
    # Give room back to the shrunken columns: first towards their preferred widths, shared in
    # proportion to what each lacks; then up to whole, left to right (the title first).
    wanted = {i: min(natural[i], columns[i].prefer or natural[i]) - widths[i] for i in keep}
    lacking = sum(w for w in wanted.values() if w > 0)
    if lacking and spare > 0:
        share = min(1.0, spare / lacking)
        for i in keep:
            extra = int(max(0, wanted[i]) * share)
            widths[i] += extra
            spare -= extra
    for i in keep:
        extra = max(0, min(spare, natural[i] - widths[i]))
        widths[i] += extra
        spare -= extra
    return Fitted(keep, [widths[i] for i in keep], [columns[i].header for i in sorted(dropped)])


def table_lines(
    columns: Sequence[Column],
    rows: Sequence[Sequence[object]],
    settings: output.Settings,
) -> tuple[list[str], list[str]]:
    """Lay out rows as lines for the settings' width; return (lines, headers left out)."""
    cells = [[sanitize.one_line(c) for c in row] for row in rows]
    natural = [display_width(c.header) for c in columns]
    for row in cells:
        natural = [max(n, display_width(v)) for n, v in zip(natural, row, strict=True)]
    fitted = fit(columns, natural, settings.width)
    lines = []
    header = GAP.join(
        pad(columns[i].header, w, columns[i].justify)
        for i, w in zip(fitted.columns, fitted.widths, strict=True)
    )
    lines.append(output.paint(header.rstrip(), "header", settings))
    for row in cells:
        parts = []
        for i, w in zip(fitted.columns, fitted.widths, strict=True):
            col = columns[i]
            text = truncate(row[i], w) if w < natural[i] else row[i]
            style = col.style_of(row[i]) if col.style_of else col.style
            gap = " " * max(0, w - display_width(text))
            painted = output.paint(text, style, settings)
            parts.append(gap + painted if col.justify == "right" else painted + gap)
        lines.append(GAP.join(parts).rstrip(" "))
    return lines, fitted.dropped


def dropped_note(dropped: Sequence[str], settings: output.Settings) -> list[str]:
    """Say which columns a narrow terminal left out and how to see them, wrapped to its width."""
    text = f"Not shown at {settings.width} columns: {', '.join(dropped)} (see --format tsv)."
    lines = wrap_pieces([(text, "dim")], settings.width or len(text))
    return [paint_pieces(line, settings) for line in lines]
