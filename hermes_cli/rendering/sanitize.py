"""The one rule for stored text on a person's screen: control characters are shown, never obeyed.

Stored text is untrusted: anyone who can message the agent writes titles, content, tool names.
Before any of it is printed for a person (tables, transcripts, errors, CSV on a terminal), every
character a terminal could act on is replaced by a visible escape: C0 controls (`\\x1b`, `\\r`,
`\\x07`), DEL (`\\x7f`), C1 controls including the 8-bit CSI (`\\u009b`), bidirectional overrides
and isolates (`\\u202e`), line/paragraph separators and lone surrogates. Escaping the introducer
is enough to defuse a whole sequence: `ESC ] 52 ; c ; … BEL` prints as the harmless text
`\\x1b]52;c;…\\x07`. Newlines and tabs are kept where the layout has room for them (transcripts)
and become spaces in one-line fields (table cells, headers).

Nothing here interprets markup: the CLI never hands data to rich as a markup string.
"""

from __future__ import annotations

import re
from typing import Any

# Bidi embeddings/overrides (U+202A–202E), isolates (U+2066–2069), marks (U+200E/F, U+061C):
# they reorder what the reader sees ("Trojan Source"). U+2028/2029 break lines in some viewers.
_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_UNSAFE_CLASS = "\x00-\x08\x0b-\x1f\x7f-\x9f" + _BIDI_AND_SEPARATORS + "\ud800-\udfff"
_UNSAFE = re.compile(f"[{_UNSAFE_CLASS}]")  # \n and \t are not in it: layout decides those
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x07": "\\x07", "\x08": "\\x08"}
_SPACES = re.compile(r"[ \t\n]+")


def escape_char(ch: str) -> str:
    """Return the visible escape of one unsafe character: \\x1b, \\x7f, \\u009b, \\u202e."""
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def _escape(match: re.Match[str]) -> str:
    return escape_char(match.group())


def has_unsafe(text: str) -> bool:
    """Tell whether text holds a character a terminal could act on (newlines and tabs aside)."""
    return _UNSAFE.search(text) is not None


def multiline(value: Any) -> str:
    """Return text safe to print on several lines: \\n and \\t kept, other controls escaped."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if _UNSAFE.search(text) is None:  # the common case: nothing to do, no copy
        return text
    # A Windows line end is a line end; a lone \r (which can overwrite a line) is shown.
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))


def one_line(value: Any) -> str:
    """Return text safe to print on one line: controls escaped, runs of whitespace as one space."""
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    if "\t" in text or "\n" in text:
        text = _SPACES.sub(" ", text).strip(" ")
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)
