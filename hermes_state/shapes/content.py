"""Message content as stored and as read: the structured-content marker, and readable text.

The agent stores text as is and structured (multimodal) content as JSON behind a marker
(``STRUCTURED_SENTINEL``). ``content_text`` is the one way every reader (listing previews,
search snippets, transcripts, browse) turns either form into text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

STRUCTURED_SENTINEL = "\x00json:"  # upstream's marker for structured (multimodal) content


def encode_content(content: Any) -> Any:
    """Turn message content into what is stored: text as is, structured content behind a marker."""
    if isinstance(content, list | dict):
        return STRUCTURED_SENTINEL + json.dumps(content, ensure_ascii=False)
    return content


def decode_content(value: Any) -> Any:
    """Turn stored content back into a string or the structured value it came from."""
    if isinstance(value, str) and value.startswith(STRUCTURED_SENTINEL):
        try:
            return json.loads(value[len(STRUCTURED_SENTINEL) :])
        except ValueError:
            return value
    return value


def content_text(content: Any, *, sep: str = "\n") -> str:
    """Return content (stored or decoded) as readable text.

    Structured parts give their text, joined by sep; a part without text (an image, a file)
    is named by its type, ``[image_url]``. Anything else structured is shown as JSON.
    """
    if type(content) is str and not content.startswith(STRUCTURED_SENTINEL):
        return content  # plain text, the usual case: nothing to decode
    value = decode_content(content)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(p, Mapping) for p in value):
        pieces = []
        for part in value:
            text = part.get("text")
            pieces.append(str(text) if text else f"[{part.get('type') or 'part'}]")
        return sep.join(pieces)
    return json.dumps(value, ensure_ascii=False)
