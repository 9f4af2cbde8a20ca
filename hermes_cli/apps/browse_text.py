"""`hermes sessions browse`: the rich `Text` every row, message and status line is drawn with.

Stored text is untrusted: it only ever reaches the screen through `render.visible` inside a
`Text` (never as markup).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_cli.apps import browse_model
from hermes_cli.apps.browse_model import Filters, Results, Row
from hermes_cli.rendering import render
from hermes_state.shapes.content import content_text

if TYPE_CHECKING:
    from rich.text import Text

    from hermes_state.search.search import MatchCount


def vault_refusal(row: Row) -> str | None:
    """Return the one-line notice refusing an edit of a vaulted session (None: it is live)."""
    if row.vault is None:
        return None
    back = f"hermes vault return {shlex.quote(row.session_id)}"
    return (
        f"{flat(row.session_id)} is in the vault ({flat(row.vault)}), read-only here:"
        f" `{flat(back)}` brings it back."
    )


# --- drawing --------------------------------------------------------------------------------


def _text() -> type[Text]:
    from rich.text import Text

    return Text


def line(text: Text, width: int) -> Text:
    """Cut a one-line Text to width cells, ending with an ellipsis when cut."""
    text.no_wrap = True
    if width > 0 and text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return text


@dataclass(frozen=True)
class Part:
    """One field of a one-line bar: its forms, longest first, and how much it matters."""

    forms: tuple[str, ...]
    priority: int = 0  # the least important part gets shorter, then goes, first
    droppable: bool = True
    style: str = ""
    label: str = ""  # drawn before the text in label_style (the key of a keys bar)
    label_style: str = ""


def fitted(parts: Sequence[Part], width: int | None, sep: str = " · ") -> Text:
    """Return the parts on one line within width cells, giving way step by step: a part takes
    its next shorter form at priority + 1, + 2 …, and goes (when droppable) one step after its
    shortest, the lowest step first; what is still too wide ends with an ellipsis. No width:
    every part in full."""
    chosen: list[str | None] = [p.forms[0] if p.forms else "" for p in parts]

    def build() -> Text:
        out = _text()()
        for part, form in zip(parts, chosen, strict=True):
            if form is None:
                continue
            if out:
                out.append(sep, style="dim" if sep.strip() else "")
            if part.label:
                out.append(part.label, style=part.label_style)
                if form:
                    out.append(" ")
            out.append(form, style=part.style)
        return out

    text = build()
    if width is None or text.cell_len <= width:
        return line(text, width or 0)
    steps: list[tuple[int, int, int, str | None]] = []
    for i, part in enumerate(parts):
        for level, shorter in enumerate(part.forms[1:], 1):
            steps.append((part.priority + level, part.priority, i, shorter))
        if part.droppable:
            steps.append((part.priority + max(1, len(part.forms)), part.priority, i, None))
    for _step, _priority, i, step_form in sorted(steps, key=lambda s: (s[0], s[1], s[2])):
        chosen[i] = step_form
        text = build()
        if text.cell_len <= width:
            return text
    return line(text, width)


def flat(value: Any) -> str:
    """Return stored text on one line, every unsafe character escaped."""
    return " ".join(render.visible(str(value or "")).split())


def marked(snippet: str | None, base: str | None = None) -> Text:
    """Return a >>>marked<<< snippet as a Text with its matches highlighted (data never markup)."""
    text = _text()(style=base or "")
    for piece, is_match in render.split_matches(flat(snippet)):
        text.append(piece, style=browse_model.MATCH_STYLE if is_match else None)
    return text


def session_label(session: dict[str, Any]) -> str:
    """Return a session's title, else its preview, else '(untitled)'."""
    return flat(session.get("title") or session.get("preview")) or "(untitled)"


CONTINUATION = re.compile(r"^(.+?)(\s+#\d+)$")  # "Fix the build #2": a later part of a chain
MIN_TITLE_CELLS = 12  # narrower than this, the title is cut at its end like the rest


def title_within(label: str, cells: int) -> str:
    """Return the label within cells, cut before its " #N" ending so that ending stays."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(label) <= cells or cells < MIN_TITLE_CELLS:
        return label
    match = CONTINUATION.match(label)
    head, tail = (match.group(1), match.group(2)) if match else (label, "")
    room = cells - cell_len(tail) - 1
    if room < 1:
        return label
    # set_cell_size pads with a space where a wide character does not fit: no gap before "…".
    return set_cell_size(head, room).rstrip() + "…" + tail


def _tags(session: dict[str, Any]) -> list[tuple[str, str]]:
    tags = []
    if session.get("vault"):
        tags.append((f" [vault {flat(session['vault'])}]", "bold yellow"))
    if session.get("pinned"):
        tags.append((" [pinned]", "bold"))
    if session.get("archived"):
        tags.append((" [archived]", "dim"))
    return tags


def row_lines(row: Row, width: int, *, now: float | None = None) -> tuple[Text, Text]:
    """Return the two lines a row shows: when, title, source, id; then the snippet or summary."""
    from rich.cells import cell_len

    Text = _text()
    now = time.time() if now is None else now
    s = row.session
    when_ts = row.hit["timestamp"] if row.hit else s.get("last_active")
    # Title first and the id last: at narrow widths the id is what gets cut (the preview's
    # header always shows it).
    first = Text()
    first.append(f"{render.relative_time(when_ts, now=now):>10}  ", style="dim")
    tags = _tags(s)
    label = session_label(s)
    # A title too long gives way in its middle: its "#2" (a continuation) and the tags stay
    # in view, and the source and id (in the preview's header) make room for it.
    room = width - first.cell_len - sum(len(tag) for tag, _ in tags)
    cut = width > 0 and cell_len(label) > room
    first.append(title_within(label, room) if cut else label, style="bold")
    for tag, style in tags:
        first.append(tag, style=style)
    if not cut:
        first.append("  ")
        first.append(flat(s.get("source") or (row.hit or {}).get("source") or "?"), style="cyan")
        first.append("  ")
        first.append(flat(row.session_id), style="dim")
    second = Text("    ")
    if row.hit:
        hit = row.hit
        role = flat(hit.get("role") or "?")
        if hit.get("tool_name"):
            role += f" ({flat(hit['tool_name'])})"
        second.append(
            role + ": ", style=browse_model.ROLE_STYLES.get(hit.get("role") or "", "bold")
        )
        if row.hits_in_session > 1:
            second.append(f"[{row.hits_in_session} hits] ", style="dim")
        second.append_text(marked(hit.get("snippet")))
    else:
        second.append(_plural(s.get("message_count") or 0, "message"), style="dim")
        if s.get("model"):
            second.append(f" · {flat(s['model'])}", style="dim")
        if s.get("title") and s.get("preview"):
            second.append(f" · {flat(s['preview'])}", style="dim")
    return line(first, width), line(second, width)


def _body(msg: dict[str, Any]) -> str:
    return content_text(msg.get("content"))


def _collapsed(label: str, detail: str) -> str:
    detail = " ".join(detail.split())
    if len(detail) > browse_model.COLLAPSED_CHARS:
        detail = detail[: browse_model.COLLAPSED_CHARS] + "…"
    return f"▸ {label}: {detail}" if detail else f"▸ {label}"


def _reasoning(msg: dict[str, Any]) -> str:
    for key in ("reasoning", "reasoning_content"):
        value = msg.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def message_text(
    msg: dict[str, Any],
    *,
    expanded: bool = False,
    is_hit: bool = False,
    pattern: re.Pattern[str] | None = None,
    limit: int | None = browse_model.BODY_CHARS,
) -> Text:
    """Return one transcript message: a header line, the body (matches highlighted), then tool
    calls and reasoning, collapsed to one line each unless expanded."""
    Text = _text()
    role = str(msg.get("role") or "?")
    head = Text()
    head.append("» " if is_hit else "  ", style="bold")
    head.append(flat(role), style=browse_model.ROLE_STYLES.get(role, "bold"))
    if msg.get("tool_name"):
        head.append(f" ({flat(msg['tool_name'])})", style="magenta")
    head.append(f" · {render.local_time(msg.get('timestamp'))}", style="dim")
    if msg.get("compacted"):
        head.append(" [compacted]", style="dim")
    elif not msg.get("active", 1):
        head.append(" [inactive]", style="dim")
    if is_hit:
        head.append("  ← hit", style="bold")
    out = Text()
    out.append_text(head)
    reasoning = _reasoning(msg)
    if reasoning:
        out.append("\n")
        if expanded:
            out.append(render.visible(reasoning), style="italic dim")
        else:
            out.append(
                render.visible(_collapsed(f"reasoning ({len(reasoning):,} chars)", reasoning)),
                style="dim",
            )
    body = _body(msg)
    if body:
        shown = body if limit is None or len(body) <= limit else body[:limit] + " …"
        out.append("\n")
        out.append_text(_highlighted(render.visible(shown), pattern))
    for call in msg.get("tool_calls") or []:
        text = _call_line(call)
        out.append("\n")
        if expanded:
            out.append(render.visible(text), style="dim")
        else:
            out.append(render.visible(_collapsed("tool call", text)), style="dim")
    return out


def _call_line(call: Any) -> str:
    if not isinstance(call, dict):
        return str(call)
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
    name = fn.get("name") or call.get("name") or "?"
    args = fn.get("arguments", call.get("arguments", ""))
    if not isinstance(args, str):
        import json

        args = json.dumps(args, ensure_ascii=False)
    return f"{name}({args})"


def _highlighted(text: str, pattern: re.Pattern[str] | None) -> Text:
    out = _text()(text)
    if pattern is not None:
        for match in pattern.finditer(text):
            if match.end() > match.start():
                out.stylize(browse_model.MATCH_STYLE, match.start(), match.end())
    return out


def search_highlight(query: str) -> re.Pattern[str] | None:
    """Return the pattern that marks the query's matches in message bodies."""
    from hermes_state.search.hits import highlight_pattern

    return highlight_pattern(query)


def session_header(session: dict[str, Any]) -> Text:
    """Return the line above a preview or transcript: id, title, source, model, size."""
    Text = _text()
    out = Text()
    out.append(flat(session.get("id")), style="bold")
    out.append("  " + session_label(session))
    for tag, style in _tags(session):
        out.append(tag, style=style)
    facts = [
        flat(session.get("source") or "?"),
        _plural(session.get("message_count") or 0, "message"),
        f"started {render.local_time(session.get('started_at'))}",
        flat(session.get("model") or "—"),
    ]
    out.append("\n" + " · ".join(facts), style="dim")
    return out


def filters_text(filters: Filters, view: str) -> Text:
    """Return the filter bar: each filter with the key that changes it."""
    Text = _text()
    out = Text()
    parts = [
        ("^S source", ",".join(filters.sources) or "any"),
        ("^R role", ",".join(filters.roles) or "any"),
        ("^T since", filters.since or "any time"),
        ("^G", browse_model.SCOPE_LABELS.get(filters.scope, filters.scope)),
        ("Tab view", view),
    ]
    for i, (key, value) in enumerate(parts):
        if i:
            out.append("  ")
        out.append(key + " ", style="dim")
        out.append(flat(value), style="bold")
    return out


def count_forms(count: MatchCount | None, counting: bool) -> tuple[str, ...]:
    """Say how many matches there are ('412,331 matches', 'at least 10,000', still counting),
    in full and shorter."""
    if count is None or count.count is None:
        if counting:
            return ("counting matches…", "counting…")
        return ("too many matches to count quickly", "too many to count")
    n = count.count
    noun = "match" if n == 1 else "matches"
    if count.complete:
        return (f"{n:,} {noun}",)
    return (f"at least {n:,} {noun}", f"≥{n:,} {noun}")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun if n == 1 else noun + 's'}"


ORDERING_FORMS = {
    "rank": ("ranked by relevance", "by relevance"),
    "newest": ("newest first", "newest"),
    "oldest": ("oldest first", "oldest"),
    "active": ("newest activity first", "newest first"),
}
ROUTE_SHORT = {"word": "word", "cjk": "CJK", "trigram": "substring", "scan": "scan"}


def status_parts(
    results: Results | None,
    *,
    count: MatchCount | None = None,
    counting: bool = False,
    changed: bool = False,
    busy: str = "",
) -> list[Part]:
    """Return the fields of the status line, each with its shorter forms and its importance:
    what is wrong or needs a key first, then counts, then how the search ran."""
    from hermes_state.search.walk import RANK_CANDIDATES

    if results is None:
        return [Part(("loading…",), droppable=False)]
    if results.error:
        error = render.visible(results.error, newlines=False)
        return [Part((error,), droppable=False, label="Error:", label_style="bold")]
    shown = len(results.rows)
    req = results.request
    parts: list[Part] = []
    if req.searching:
        if results.ordering == "rank_recent":
            order: tuple[str, ...] = (
                f"ranked among the newest {RANK_CANDIDATES:,}",
                f"ranked: newest {RANK_CANDIDATES:,}",
            )
        else:
            order = ORDERING_FORMS.get(results.ordering, (results.ordering,))
        if req.view == "sessions":
            sessions = _plural(shown, "session")
            parts.append(
                Part(
                    (f"{sessions} in the first {browse_model.GROUPED_HITS:,} hits", sessions),
                    priority=5,
                )
            )
        else:
            parts.append(Part(count_forms(count, counting), priority=5, droppable=False))
            hits = _plural(shown, "hit")
            parts.append(Part((f"{hits} shown", f"{shown:,} shown"), priority=4))
        parts.append(Part(order, priority=2))
        route = browse_model.ROUTE_TEXT.get(results.route, results.route)
        parts.append(Part((route, ROUTE_SHORT.get(results.route, route)), priority=1))
        if results.partial:
            back = results.searched_back_to
            since = f", back to {render.local_time(back)}" if back else ""
            examined, candidates = f"{results.examined:,}", f"{results.candidates:,}"
            parts.append(
                Part(
                    (
                        f"partial: {examined} of {candidates} candidates examined{since}",
                        f"partial: {examined} of {candidates}",
                        f"partial: {examined}/{candidates}",
                        "partial",
                    ),
                    priority=5,
                    droppable=False,
                    style="bold",
                )
            )
    else:
        total = results.total or 0
        parts.append(Part((_plural(total, "session"),), priority=6, droppable=False))
        parts.append(Part(ORDERING_FORMS["active"], priority=2))
        parts.append(Part((f"{shown:,} shown",), priority=4))
    parts.append(Part((f"{results.elapsed_ms:.0f} ms",), priority=0, style="dim"))
    if busy:
        parts.append(Part((busy, "waiting…"), priority=3, droppable=False, style="bold"))
    elif changed:
        parts.append(
            Part(
                ("the store changed: F5 refreshes", "changed: F5 refreshes", "changed: F5"),
                priority=3,
                droppable=False,
                style="bold",
            )
        )
    return parts


def transcript_parts(
    shown: tuple[int, int] | None, total: int, *, loaded: bool, error: str | None = None
) -> list[Part]:
    """Return the fields of the transcript's status line: which messages are on screen."""
    parts = []
    if error:
        text = render.visible(error, newlines=False)
        parts.append(Part((text,), priority=9, label="Error:", label_style="bold"))
    if shown is not None and total:
        first, last = shown[0] + 1, shown[1] + 1
        span = f"{first:,}" if first == last else f"{first:,}–{last:,}"
        of = f"{total:,}" if loaded else f"{total:,} read so far"
        parts.append(Part((f"messages {span} of {of}", f"{span} of {total:,}"), priority=6))
        parts.append(Part((f"{last * 100 // total}%",), priority=2))
    elif loaded:
        parts.append(Part(("no messages",), priority=6))
    if not loaded:
        parts.append(Part(("loading…",), priority=5))
    elif total >= (most := browse_model.TRANSCRIPT_MAX):
        parts.append(
            Part(
                (f"the first {most:,}; export the session to read them all", f"the first {most:,}"),
                priority=4,
                droppable=False,
            )
        )
    return parts


def status_text(
    results: Results | None,
    *,
    count: MatchCount | None = None,
    counting: bool = False,
    changed: bool = False,
    busy: str = "",
    width: int | None = None,
) -> Text:
    """Return the status line (within width cells): match count, rows shown, how the search
    ran; what does not fit gets shorter or goes, least important first."""
    parts = status_parts(results, count=count, counting=counting, changed=changed, busy=busy)
    return fitted(parts, width)


# --- the command ----------------------------------------------------------------------------
