"""The Textual screens of `hermes sessions browse` (imported only when that command runs).

The widgets only draw and dispatch: every read and edit is a method of `browse.Browser`, and
every row and message is a rich `Text` built by `hermes_cli.apps.browse` from escaped stored text.
Reads run in worker threads, newest request first: a keystroke made while a search runs
replaces any search still waiting, so typing never queues stale work.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Button, Input, RichLog, Static

from hermes_cli.apps import browse
from hermes_cli.apps.browse import BrowseError, Browser, Request, Results, Row
from hermes_cli.rendering import render

if TYPE_CHECKING:
    from hermes_state.search.search import MatchCount

NARROW_COLUMNS = 100  # below this the preview goes under the list instead of beside it
LOAD_MORE_MARGIN = 5  # fetch the next page when the cursor is this close to the end
CHANGE_POLL_S = 2.0
COUNT_DELAY_S = 0.25  # count matches once the results have stood this long (not mid-typing)


class _Lane:
    """Runs the newest job of one kind in a worker thread; jobs asked for meanwhile replace
    each other, and only the newest job's result is handed over."""

    def __init__(self, owner: Widget, name: str) -> None:
        self.owner = owner  # the screen whose widgets the results are drawn on
        self.app: App[Any] = owner.app
        self.name = name
        self.running = False
        self.pending: tuple[Callable[[], Any], Callable[[Any], Any]] | None = None

    def submit(self, work: Callable[[], Any], done: Callable[[Any], Any]) -> None:
        """Run work() in a thread, then done(result) on the app's loop (unless superseded)."""
        self.pending = (work, done)
        if not self.running:
            self._start()

    def _start(self) -> None:
        assert self.pending is not None
        work, done = self.pending
        self.pending = None
        self.running = True

        def job() -> None:
            result = work()
            with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                self.app.call_from_thread(self._finish, done, result)  # type: ignore[arg-type]

        self.app.run_worker(job, thread=True, group=self.name)

    async def _finish(self, done: Callable[[Any], Any], result: Any) -> None:
        self.running = False
        if not (self.app.is_running and self.owner.is_attached):
            return  # the app is closing (its widgets are going): the result has no place
        if self.pending is not None:
            self._start()  # a newer job is waiting: this result is already stale
            return
        outcome = done(result)
        if hasattr(outcome, "__await__"):
            await outcome


# --- the list -------------------------------------------------------------------------------


class HitList(ScrollView, can_focus=False):
    """The hits or sessions, two lines a row; only the rows on screen are ever drawn (Textual's
    line API), so showing 50 or 5,000 rows costs the same."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"hitlist--cursor"}
    DEFAULT_CSS = """
    HitList > .hitlist--cursor { background: $accent 35%; text-style: bold; }
    """
    ROW_LINES = 2
    MARKER = "› "

    class Highlighted(Message):
        """The cursor moved to another row (index None: the list is empty)."""

        def __init__(self, index: int | None) -> None:
            super().__init__()
            self.index = index

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Row] = []
        self.cursor: int | None = None
        self._strips: dict[tuple[int, int], tuple[Strip, Strip]] = {}
        self._now = time.time()

    def set_rows(self, rows: list[Row], cursor: int = 0) -> None:
        """Show these rows, with the cursor on one of them."""
        self.rows = list(rows)
        self._strips.clear()
        self._now = time.time()
        self.cursor = None
        self._resize()
        self.scroll_to(y=0, animate=False, immediate=True)
        self.move_to(cursor)

    def add_rows(self, rows: list[Row]) -> None:
        """Append a further page of rows."""
        self.rows.extend(rows)
        self._resize()

    def _resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows) * 2)
        self.refresh()

    def move_to(self, index: int | None) -> None:
        """Put the cursor on row index (clamped), keep it in view and announce it."""
        if not self.rows or index is None:
            changed = self.cursor is not None
            self.cursor = None
            if changed or not self.rows:
                self.post_message(self.Highlighted(None))
            self.refresh()
            return
        index = max(0, min(len(self.rows) - 1, index))
        if index == self.cursor:
            return
        self.cursor = index
        top = index * self.ROW_LINES
        height = self.scrollable_content_region.height
        if top < self.scroll_y:
            self.scroll_to(y=top, animate=False, immediate=True)
        elif height and top + self.ROW_LINES > self.scroll_y + height:
            self.scroll_to(y=top + self.ROW_LINES - height, animate=False, immediate=True)
        self.refresh()
        self.post_message(self.Highlighted(index))

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self._resize()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None:
            self.move_to((offset.y + int(self.scroll_y)) // self.ROW_LINES)

    def drawn(self, index: int) -> str:
        """Return the text row index shows (both lines), as drawn at the current width."""
        width = self.scrollable_content_region.width
        return "\n".join(strip.text for strip in self._row(index, width))

    def _row(self, index: int, width: int) -> tuple[Strip, Strip]:
        key = (index, width)
        strips = self._strips.get(key)
        if strips is None:
            inner = max(1, width - len(self.MARKER))
            lines = browse.row_lines(self.rows[index], inner, now=self._now)
            console = self.app.console
            first, second = (
                Strip(list(text.render(console))).crop_extend(0, inner, None) for text in lines
            )
            strips = (first, second)
            self._strips[key] = strips
        return strips

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        line = int(self.scroll_y) + y
        index, part = divmod(line, self.ROW_LINES)
        if index >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        strip = self._row(index, width)[part]
        mark = self.MARKER if (index == self.cursor and part == 0) else " " * len(self.MARKER)
        strip = Strip.join([Strip([Segment(mark)]), strip])
        if index == self.cursor:
            strip = strip.apply_style(self.get_component_rich_style("hitlist--cursor"))
        return strip.apply_style(self.rich_style)


# --- one-line bars and the key help ---------------------------------------------------------


class FittedLine(Widget):
    """One line of parts that fits its width however narrow: shorter forms first, then the
    least important parts go (see browse.fitted)."""

    DEFAULT_CSS = "FittedLine { height: 1; }"

    def __init__(
        self,
        parts: list[browse.Part] | None = None,
        *,
        sep: str = " · ",
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.parts = list(parts or [])
        self.sep = sep

    def update(self, parts: list[browse.Part]) -> None:
        """Show these parts instead."""
        self.parts = list(parts)
        self.refresh()

    @property
    def text(self) -> Text:
        """Return the line as drawn at the current width."""
        return browse.fitted(self.parts, self.content_size.width or None, self.sep)

    def render(self) -> Text:
        return self.text


KEY_NAMES = {
    "enter": "Enter",
    "escape": "Esc",
    "tab": "Tab",
    "up": "Up",
    "down": "Down",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "home": "Home",
    "end": "End",
    "space": "Space",
}
# What Enter prints, as the help screen says it (--print id / --print resume).
CHOOSE_HELP = {
    "id": "choose: leave and print the session id",
    "resume": (
        "choose: leave and print the line that resumes the session in Hermes Agent "
        "(the agent's own `hermes --resume ID`)"
    ),
}
ALWAYS_SHOWN = frozenset({"help", "app.quit"})  # the keys bar drops others when it is narrow


def key_label(key: str) -> str:
    """Return a key as the screen names it: F3, ^O, Enter, PgDn."""
    if key in KEY_NAMES:
        return KEY_NAMES[key]
    if key.startswith("ctrl+"):
        return "^" + key.removeprefix("ctrl+").upper()
    if key[:1] == "f" and key[1:].isdigit():
        return key.upper()
    return key


def _key_parts(bindings: list[BindingType]) -> list[browse.Part]:
    """Return the keys bar: each shown binding's first key and what it does; Help and Quit
    always stay, the others go from the last when the bar is narrow."""
    shown = [b for b in bindings if isinstance(b, Binding) and b.show]
    return [
        browse.Part(
            (binding.description,),
            priority=-i,
            droppable=binding.action not in ALWAYS_SHOWN,
            label=key_label(binding.key.split(",")[0]),
            label_style="bold reverse",
        )
        for i, binding in enumerate(shown)
    ]


def _help_entries(
    bindings: list[BindingType], overrides: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """Return every binding as (its keys, what it does), for the help screen."""
    entries = []
    for binding in bindings:
        if not isinstance(binding, Binding):
            continue
        keys = " or ".join(key_label(k.strip()) for k in binding.key.split(","))
        action = binding.action.split("(")[0]
        what = (overrides or {}).get(action) or binding.tooltip or binding.description
        entries.append((keys, what))
    return entries


HELP_BOX_ROWS = 5  # the help box's border (2), title (1), gap (1) and "more keys" line (1)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen below it and what it does; any of Esc, F1, q or Enter closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q,enter", "close", "Close"),
    ]

    def __init__(self, title: str, entries: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.entries = entries

    def compose(self) -> ComposeResult:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for keys, what in self.entries:
            table.add_row(Text(keys), Text(what))
        title = Text(self.title_text, style="bold")
        title.append("  Esc, F1, q or Enter: close", style="dim")  # on top: never scrolled away
        with Vertical(classes="dialog help"):
            yield Static(title)
            with VerticalScroll(id="help-keys"):
                yield Static(table)
            yield Static("", id="help-more")

    def on_mount(self) -> None:
        keys = self.query_one("#help-keys", VerticalScroll)
        keys.focus()
        self._fit_keys()
        self.watch(keys, "scroll_y", lambda _old, _new: self._more_hint(), init=False)
        self.call_after_refresh(self._more_hint)

    def on_resize(self) -> None:
        self._fit_keys()
        self.call_after_refresh(self._more_hint)

    def _fit_keys(self) -> None:
        """Give the key list the rows the box has inside: 90% of the screen less its border,
        title, the gap under it and the line that says more keys are below."""
        rows = int(self.size.height * 0.9) - HELP_BOX_ROWS
        self.query_one("#help-keys", VerticalScroll).styles.max_height = max(3, rows)

    def _more_hint(self) -> None:
        """Say, under a key list cut by a short terminal, that more keys are below."""
        keys = self.query_one("#help-keys", VerticalScroll)
        more = keys.max_scroll_y > 0 and keys.scroll_y < keys.max_scroll_y
        hint = "more keys below: Down, PgDn or End" if more else ""
        self.query_one("#help-more", Static).update(Text(hint, style="dim"))

    def action_close(self) -> None:
        """Close the help."""
        self.dismiss(None)


# --- dialogs --------------------------------------------------------------------------------


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; y or the Yes button confirms, n, Esc or the No button declines."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: Text, *, danger: bool = False) -> None:
        super().__init__()
        self.question = question
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error" if self.danger else "primary")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """Close the dialog with the answer."""
        self.dismiss(yes)


class AskScreen(ModalScreen[str | None]):
    """Ask for one line of text (a title, a path); Enter accepts it, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: Text, value: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
            yield Input(value=self.value, id="answer")
            yield Static(Text("Enter: OK · Esc: cancel", style="dim"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Close the dialog without an answer."""
        self.dismiss(None)


# --- the full transcript --------------------------------------------------------------------


class TranscriptView(Widget):
    """A session's messages, each wrapped only when it first comes into view (Textual's line
    API): opening 5,000 messages costs what one screenful costs, and so does F6 or a resize.

    The position is a message and a line within it, not a line of the whole transcript, so
    nothing ever needs the height of every message; the bar on the right shows where the
    screen is among the messages.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"transcript--thumb", "transcript--track"}
    DEFAULT_CSS = """
    TranscriptView > .transcript--thumb { color: $primary; }
    TranscriptView > .transcript--track { color: $panel; }
    """
    WHEEL_LINES = 3

    class Moved(Message):
        """What the view shows changed (it scrolled, or more messages arrived)."""

    def __init__(self, *, expanded: bool, pattern: Any, id: str | None = None) -> None:
        super().__init__(id=id)
        self.messages: list[dict[str, Any]] = []
        self.hit_index: int | None = None
        self.expanded = expanded
        self.pattern = pattern
        self.top: tuple[int, int] = (0, 0)  # the message on the first line, and its line there
        self.moved_by_user = False
        self.rendered = 0  # messages wrapped so far (bench/ and the tests read it)
        self._strips: dict[int, list[Strip]] = {}
        self._strips_width = 0
        self._frame: list[tuple[int, Strip]] | None = None

    # content

    def add(self, batch: list[dict[str, Any]], hit_id: Any = None) -> None:
        """Append messages; the first time the hit arrives, show it (unless the user moved)."""
        first = len(self.messages)
        self.messages.extend(batch)
        if hit_id is not None and self.hit_index is None:
            for i, msg in enumerate(batch, first):
                if msg.get("id") == hit_id:
                    self.hit_index = i
                    self._strips.pop(i, None)
                    if not self.moved_by_user:
                        self.show_message(i)
                    break
        self._changed()

    def set_expanded(self, expanded: bool) -> None:
        """Show tool calls and reasoning in full or collapsed; the top message stays on top."""
        self.expanded = expanded
        self._strips.clear()
        self.top = self._clamped((self.top[0], 0))
        self._changed()

    def _width(self) -> int:
        return max(1, self.content_size.width - 1)  # the last column is the position bar

    def lines_of(self, index: int) -> list[Strip]:
        """Return message index wrapped at the current width, with the blank line after it."""
        width = self._width()
        if width != self._strips_width:
            self._strips.clear()
            self._strips_width = width
        strips = self._strips.get(index)
        if strips is None:
            text = browse.message_text(
                self.messages[index],
                expanded=self.expanded,
                is_hit=index == self.hit_index,
                pattern=self.pattern,
                limit=None,
            )
            console = self.app.console
            lines = console.render_lines(text, console.options.update_width(width), pad=True)
            strips = [Strip(line, width) for line in lines]
            strips.append(Strip.blank(width))
            self._strips[index] = strips
            self.rendered += 1
        return strips

    # position

    def _moved(self, top: tuple[int, int], lines: int) -> tuple[int, int]:
        """Return the position lines further down (up when negative), within the messages."""
        if not self.messages:
            return (0, 0)
        index, line = top
        last = len(self.messages) - 1
        line += lines
        while line < 0 and index > 0:
            index -= 1
            line += len(self.lines_of(index))
        while index < last and line >= len(self.lines_of(index)):
            line -= len(self.lines_of(index))
            index += 1
        return (index, max(0, min(line, len(self.lines_of(index)) - 1)))

    def _last_top(self) -> tuple[int, int]:
        """Return the position that puts the end of the last message at the bottom."""
        remaining = self.content_size.height
        index = len(self.messages) - 1
        while index >= 0:
            height = len(self.lines_of(index))
            if height >= remaining:
                return (index, height - remaining)
            remaining -= height
            index -= 1
        return (0, 0)

    def _clamped(self, top: tuple[int, int]) -> tuple[int, int]:
        if not self.content_size.height:
            return top  # not laid out yet: on_resize places it
        return max((0, 0), min(top, self._last_top()))

    def _go(self, top: tuple[int, int], *, by_user: bool = True) -> None:
        self.moved_by_user = self.moved_by_user or by_user
        top = self._clamped(top)
        if top != self.top:
            self.top = top
            self._changed()

    def scroll_lines(self, lines: int) -> None:
        """Scroll by lines (up when negative)."""
        self._go(self._moved(self.top, lines))

    def scroll_page(self, pages: int) -> None:
        """Scroll by screenfuls, keeping one line of the last screen in view."""
        self.scroll_lines(pages * max(1, self.content_size.height - 1))

    def go_first(self) -> None:
        """Go to the first message."""
        self._go((0, 0))

    def go_last(self) -> None:
        """Go to the end of the last message (of those read so far)."""
        self._go(self._last_top())

    def show_message(self, index: int) -> None:
        """Put message index a third of the way down, the messages before it above it."""
        third = self.content_size.height // 3
        self._go(self._moved((index, 0), -third), by_user=False)

    def visible_range(self) -> tuple[int, int] | None:
        """Return the first and last message on screen (None when there is none yet)."""
        frame = self._lines()
        return (frame[0][0], frame[-1][0]) if frame else None

    def _changed(self) -> None:
        self._frame = None
        self.refresh()
        self.post_message(self.Moved())

    # drawing

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        if self.hit_index is not None and not self.moved_by_user:
            self.show_message(self.hit_index)  # its context above it, at the new size
        else:
            self.top = self._clamped((self.top[0], 0))
        self._changed()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self.scroll_lines(self.WHEEL_LINES)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self.scroll_lines(-self.WHEEL_LINES)

    def _lines(self) -> list[tuple[int, Strip]]:
        """Return the lines on screen, each with the index of its message."""
        if self._frame is None:
            height = self.content_size.height
            frame: list[tuple[int, Strip]] = []
            index, line = self.top
            while len(frame) < height and index < len(self.messages):
                strips = self.lines_of(index)[line : line + height - len(frame)]
                frame.extend((index, strip) for strip in strips)
                index, line = index + 1, 0
            self._frame = frame
        return self._frame

    def _bar(self) -> range:
        """Return the rows of the position bar's thumb (empty when all is in view)."""
        shown, total, height = self.visible_range(), len(self.messages), self.content_size.height
        if shown is None or not height or (shown == (0, total - 1) and self.top == (0, 0)):
            return range(0)
        size = max(1, round(height * (shown[1] - shown[0] + 1) / total))
        start = min(height - size, round(height * shown[0] / total))
        return range(start, start + size)

    def render_line(self, y: int) -> Strip:
        frame = self._lines()
        width = self._width()
        if y < len(frame):
            strip = frame[y][1]
        elif y == 0 and not self.messages:
            strip = Strip(list(Text("loading…", style="dim").render(self.app.console)))
            strip = strip.crop_extend(0, width, None)
        else:
            strip = Strip.blank(width)
        on_thumb = y in self._bar()
        part = "transcript--thumb" if on_thumb else "transcript--track"
        bar = Segment("┃" if on_thumb else "│", self.get_component_rich_style(part))
        return Strip.join([strip, Strip([bar], 1)]).apply_style(self.rich_style)


class TranscriptScreen(Screen[None]):
    """One session's whole transcript (up to TRANSCRIPT_MAX messages), scrolled to the hit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", tooltip="show these keys"),
        Binding("escape,q", "back", "Back", tooltip="back to the list"),
        Binding("enter", "choose", "Choose", tooltip=CHOOSE_HELP["id"]),
        Binding("f6", "expand", "Expand", tooltip="expand tool calls and reasoning, or collapse"),
        Binding("ctrl+q,ctrl+c", "app.quit", "Quit", tooltip="quit without choosing"),
        Binding("up", "scroll(-1)", "Up", show=False, tooltip="a line up"),
        Binding("down", "scroll(1)", "Down", show=False, tooltip="a line down"),
        Binding("pageup,b", "page(-1)", "Page up", show=False, tooltip="a page up"),
        Binding("pagedown,space", "page(1)", "Page down", show=False, tooltip="a page down"),
        Binding("home", "home", "Home", show=False, tooltip="the first message"),
        Binding("end", "end", "End", show=False, tooltip="the last message"),
        Binding("h", "to_hit", "Hit", show=False, tooltip="back to the hit"),
    ]

    def __init__(self, browser: Browser, row: Row, *, expanded: bool, pattern: Any) -> None:
        super().__init__()
        self.browser = browser
        self.row = row
        self.expanded = expanded
        self.pattern = pattern
        self.loaded = False
        self.error: str | None = None
        self.opened_at = time.perf_counter()
        self.first_shown_at: float | None = None  # when the first messages were drawn (bench/)
        self.loaded_at: float | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Return the messages read so far."""
        return self.query_one(TranscriptView).messages

    def compose(self) -> ComposeResult:
        yield Static(browse.session_header(self.row.session), id="transcript-head")
        yield TranscriptView(expanded=self.expanded, pattern=self.pattern, id="transcript")
        yield FittedLine(browse.transcript_parts(None, 0, loaded=False), id="transcript-status")
        yield FittedLine(_key_parts(self.BINDINGS), sep=" ", classes="keys")

    def on_mount(self) -> None:
        self.run_worker(self._load, thread=True, group="transcript")

    def _load(self) -> None:
        batch: list[dict[str, Any]] = []
        size = browse.TRANSCRIPT_FIRST  # a small first batch: the first screen comes at once
        try:
            for msg in self.browser.transcript(self.row.session_id, self.row.vault):
                batch.append(msg)
                if len(batch) >= size:
                    self.app.call_from_thread(self._append, batch)
                    batch, size = [], browse.TRANSCRIPT_CHUNK
        except BrowseError as exc:
            self.error = str(exc)
        self.app.call_from_thread(self._append, batch, True)

    def _append(self, batch: list[dict[str, Any]], last: bool = False) -> None:
        if not self.is_attached:
            return  # Esc came before the reading finished: the screen and its view are gone
        view = self.query_one(TranscriptView)
        view.add(batch, self.row.hit["id"] if self.row.hit else None)
        if last:
            self.loaded = True
            self.loaded_at = time.perf_counter()
        if self.first_shown_at is None and (view.messages or last):
            self.call_after_refresh(self._first_shown)
        self._status()

    def _first_shown(self) -> None:
        if self.first_shown_at is None:
            self.first_shown_at = time.perf_counter()

    def on_transcript_view_moved(self, event: TranscriptView.Moved) -> None:
        self._status()

    def _status(self) -> None:
        view = self.query_one(TranscriptView)
        parts = browse.transcript_parts(
            view.visible_range(), len(view.messages), loaded=self.loaded, error=self.error
        )
        self.query_one("#transcript-status", FittedLine).update(parts)

    def help_entries(self) -> list[tuple[str, str]]:
        """Return the keys of this screen and what each does, as the help screen lists them."""
        prints = getattr(self.app, "prints", "id")
        return _help_entries(self.BINDINGS, {"choose": CHOOSE_HELP.get(prints, "")})

    def action_help(self) -> None:
        """List every key of this screen."""
        self.app.push_screen(HelpScreen("Keys of the transcript", self.help_entries()))

    def action_back(self) -> None:
        """Return to the list."""
        self.app.pop_screen()

    def action_choose(self) -> None:
        """Leave, printing this session's id."""
        self.app.exit(self.row.session_id)

    def action_expand(self) -> None:
        """Show tool calls and reasoning in full, or collapse them again."""
        self.expanded = not self.expanded
        self.query_one(TranscriptView).set_expanded(self.expanded)

    def action_scroll(self, lines: int) -> None:
        """Scroll by lines."""
        self.query_one(TranscriptView).scroll_lines(lines)

    def action_page(self, pages: int) -> None:
        """Scroll by pages."""
        self.query_one(TranscriptView).scroll_page(pages)

    def action_home(self) -> None:
        """Go to the first message."""
        self.query_one(TranscriptView).go_first()

    def action_end(self) -> None:
        """Go to the last message."""
        self.query_one(TranscriptView).go_last()

    def action_to_hit(self) -> None:
        """Show the hit again."""
        view = self.query_one(TranscriptView)
        if view.hit_index is None:
            self.app.bell()
            return
        view.show_message(view.hit_index)


# --- the main screen ------------------------------------------------------------------------


class BrowseScreen(Screen[None]):
    """Search box, filter bar, hits or sessions, the preview, a status line and the keys."""

    # In the keys bar in this order; a narrow bar keeps the first ones (and Help and Quit).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", priority=True, tooltip="show these keys"),
        Binding("enter", "choose", "Choose", priority=True, tooltip=CHOOSE_HELP["id"]),
        Binding(
            "escape",
            "escape",
            "Clear",
            priority=True,
            tooltip="clear the query; with an empty query, leave without choosing",
        ),
        Binding("f3,ctrl+o", "open", "Open", priority=True, tooltip="open the whole transcript"),
        Binding(
            "tab", "toggle_view", "View", priority=True, tooltip="one row per hit / per session"
        ),
        Binding("f2", "rename", "Rename", priority=True, tooltip="rename the session"),
        Binding("f4", "export", "Export", priority=True, tooltip="export the session to a file"),
        Binding("f7", "pin", "Pin", priority=True, tooltip="pin or unpin the session"),
        Binding("f8", "delete", "Delete", priority=True, tooltip="delete the session"),
        Binding(
            "f9", "archive", "Archive", priority=True, tooltip="archive or unarchive the session"
        ),
        Binding(
            "f5,ctrl+l",
            "refresh",
            "Refresh",
            priority=True,
            tooltip="read the store again (new messages of a running gateway)",
        ),
        Binding(
            "f6",
            "expand",
            "Expand",
            priority=True,
            tooltip="expand tool calls and reasoning in the preview, or collapse",
        ),
        Binding(
            "ctrl+q,ctrl+c", "app.quit", "Quit", priority=True, tooltip="quit without choosing"
        ),
        Binding("up,ctrl+p", "move(-1)", "Up", show=False, priority=True, tooltip="previous row"),
        Binding("down,ctrl+n", "move(1)", "Down", show=False, priority=True, tooltip="next row"),
        Binding("pageup", "page(-1)", "Page up", show=False, priority=True, tooltip="a page up"),
        Binding(
            "pagedown", "page(1)", "Page down", show=False, priority=True, tooltip="a page down"
        ),
        Binding(
            "ctrl+s",
            "cycle('source')",
            "Source",
            show=False,
            priority=True,
            tooltip="next source filter",
        ),
        Binding(
            "ctrl+r", "cycle('role')", "Role", show=False, priority=True, tooltip="next role filter"
        ),
        Binding(
            "ctrl+t",
            "cycle('since')",
            "Since",
            show=False,
            priority=True,
            tooltip="next time filter (messages and sessions active since)",
        ),
        Binding(
            "ctrl+g",
            "cycle('scope')",
            "Archived/pinned",
            show=False,
            priority=True,
            tooltip="not archived / all, archived too / archived only / pinned only",
        ),
    ]

    def __init__(self, browser: Browser, initial: Results) -> None:
        super().__init__()
        self.browser = browser
        first = initial.request
        self.view = first.view
        self.query_text = first.query
        self.filters = first.filters
        self.initial_filters = first.filters
        self.results: Results | None = None
        self.rows: list[Row] = []
        self.count: MatchCount | None = None
        self.counting = False
        self.expanded = False
        self.preview_row: Row | None = None
        self.preview_messages: list[dict[str, Any]] = []
        self.preview_texts: list[Text] = []  # each previewed message as drawn
        self.preview_hit: int | None = None  # which of them is the hit
        self.shown_at: float | None = None
        self.busy = ""
        self.changed = False
        self.keystroke_at: float | None = None
        self.latencies_ms: list[float] = []  # keystroke to results shown, for bench/
        self.notices: list[str] = []  # what each finished edit reported
        self._seq = first.seq
        self._count_seq = 0
        self._keep: str | None = None
        self._loading_more = False
        self._count_timer: Any = None
        self._initial = initial
        self._marker = browser.changed_marker()
        self._pattern: Any = None
        self._search = _Lane(self, "search")
        self._more = _Lane(self, "more")
        self._preview = _Lane(self, "preview")
        self._count = _Lane(self, "count")
        self._edit = _Lane(self, "edit")

    # layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="searchbar"):
            yield Static(Text("Search ", style="bold"), id="prompt")
            yield Input(
                value=self.query_text,
                placeholder='words, "a phrase", prefix*, part of a word, CJK — empty: sessions',
                id="query",
            )
        yield Static(id="filters")
        with Horizontal(id="panes"):
            yield HitList(id="list")
            with Vertical(id="side"):
                yield Static(id="preview-head")
                yield RichLog(
                    id="preview",
                    wrap=True,
                    markup=False,
                    highlight=False,
                    min_width=1,
                    auto_scroll=False,
                )
        yield FittedLine(browse.status_parts(None), id="status")
        yield FittedLine(_key_parts(self.BINDINGS), sep=" ", classes="keys")

    def on_mount(self) -> None:
        self.query_one("#preview", RichLog).can_focus = False
        self.query_one("#query", Input).focus()
        self._draw_filters()
        self._show(self._initial)
        self.set_interval(CHANGE_POLL_S, self._poll_changes)

    def on_resize(self, event: Any) -> None:
        self.set_class(self.size.width < NARROW_COLUMNS, "narrow")
        # The preview's lines were wrapped at the old width: draw it again at the new one.
        self.call_after_refresh(lambda: self._preview_of(self.preview_row))

    # reading

    def _request(self, *, keep: str | None = None) -> None:
        """Ask for the current view of the query under the filters (newest request wins)."""
        self._seq += 1
        self._keep = keep
        request = Request(self._seq, self.view, self.query_text, self.filters)
        self._search.submit(lambda: self.browser.fetch(request), self._show)

    def _show(self, results: Results) -> None:
        if results.request.seq != self._seq:
            return  # a newer request is on its way
        self.results = results
        self.rows = list(results.rows)
        self._pattern = (
            browse.search_highlight(results.request.query) if results.request.searching else None
        )
        keep = self._keep
        index = next((i for i, r in enumerate(self.rows) if r.session_id == keep), 0)
        self.query_one("#list", HitList).set_rows(self.rows, index)
        if self.keystroke_at is not None:
            self.shown_at = time.perf_counter()
            self.latencies_ms.append((self.shown_at - self.keystroke_at) * 1000)
            self.keystroke_at = None
        self._schedule_count(results)
        self._draw_status()

    def _schedule_count(self, results: Results) -> None:
        """Count the matches once these results have stood for a moment (not mid-typing)."""
        self._count_seq += 1
        self.count = None
        if self._count_timer is not None:
            self._count_timer.stop()
            self._count_timer = None
        request = results.request
        self.counting = bool(not results.error and request.searching and request.view == "hits")
        if self.counting:
            seq = self._count_seq
            self._count_timer = self.set_timer(
                COUNT_DELAY_S, lambda: self._start_count(request, seq)
            )

    def _start_count(self, request: Request, seq: int) -> None:
        self._count_timer = None

        def work() -> Any:
            return self.browser.count(request, lambda: self._count_seq != seq)

        def done(count: Any) -> None:
            if seq == self._count_seq:
                self.count = count
                self.counting = False
                self._draw_status()

        self._count.submit(work, done)

    def _more_rows(self) -> None:
        results = self.results
        if results is None or not results.more or self._loading_more:
            return
        self._loading_more = True
        request = browse.request_after(results)

        def done(page: Results) -> None:
            self._loading_more = False
            if page.request.seq != self._seq or page.error or self.results is None:
                return
            self.rows.extend(page.rows)
            self.results.rows = self.rows
            self.results.more = page.more
            listing = self.query_one("#list", HitList)
            listing.add_rows(page.rows)
            self._draw_status()
            if (listing.cursor or 0) >= len(self.rows) - LOAD_MORE_MARGIN:
                self._more_rows()  # the cursor is still near the end: keep going

        self._more.submit(lambda: self.browser.fetch(request), done)

    # preview

    def on_hit_list_highlighted(self, event: HitList.Highlighted) -> None:
        index = event.index
        if index is None or not 0 <= index < len(self.rows):
            self._preview_of(None)
            return
        self._preview_of(self.rows[index])
        if index >= len(self.rows) - LOAD_MORE_MARGIN:
            self._more_rows()

    def _preview_of(self, row: Row | None) -> None:
        self.preview_row = row
        if row is None:
            self._draw_preview(None, [])
            return

        def work() -> Any:
            try:
                return self.browser.window(row)
            except BrowseError as exc:
                return exc

        self._preview.submit(work, lambda found: self._draw_preview(row, found))

    def _draw_preview(self, row: Row | None, found: Any) -> None:
        if row is not self.preview_row:
            return
        pane = self.query_one("#preview", RichLog)
        pane.clear()
        self.preview_messages = []
        self.preview_texts = []
        self.preview_hit = None
        head = browse.session_header(row.session) if row is not None else Text("")
        self.query_one("#preview-head", Static).update(head, layout=False)
        if row is None:
            return
        if isinstance(found, BrowseError):
            pane.write(Text("Error: " + render.visible(str(found), newlines=False)))
            return
        hit_id = row.hit["id"] if row.hit else None
        hit_line = None
        for msg in found:
            is_hit = msg.get("id") == hit_id
            text = browse.message_text(
                msg, expanded=self.expanded, is_hit=is_hit, pattern=self._pattern
            )
            if is_hit:
                hit_line = len(pane.lines)
                self.preview_hit = len(self.preview_messages)
            self.preview_messages.append(msg)
            self.preview_texts.append(text)
            pane.write(text)
            pane.write(Text(""))
        if not found:
            pane.write(Text("(no messages)", style="dim"))
        # The hit a third of the way down: the messages before it stay in view.
        third = pane.scrollable_content_region.height // 3
        top = 0 if hit_line is None else max(0, hit_line - third)
        pane.scroll_to(y=top, animate=False, immediate=True)

    # status

    def _draw_filters(self) -> None:
        self.query_one("#filters", Static).update(browse.filters_text(self.filters, self.view))

    def _draw_status(self) -> None:
        parts = browse.status_parts(
            self.results,
            count=self.count,
            counting=self.counting,
            changed=self.changed,
            busy=self.busy,
        )
        self.query_one("#status", FittedLine).update(parts)

    def _poll_changes(self) -> None:
        marker = self.browser.changed_marker()
        if marker != self._marker:
            self._marker = marker
            self.changed = True
            self._draw_status()

    # typing and keys

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "query" or event.value == self.query_text:
            return
        self.query_text = event.value
        self.keystroke_at = time.perf_counter()
        self._request()

    def current_row(self) -> Row | None:
        """Return the highlighted row, if any."""
        index = self.query_one("#list", HitList).cursor
        if index is None or not 0 <= index < len(self.rows):
            return None
        return self.rows[index]

    def action_move(self, step: int) -> None:
        """Move the cursor up or down the list."""
        listing = self.query_one("#list", HitList)
        if self.rows:
            listing.move_to((listing.cursor or 0) + step)

    def action_page(self, direction: int) -> None:
        """Move the cursor a page up or down."""
        listing = self.query_one("#list", HitList)
        rows_per_page = max(1, listing.scrollable_content_region.height // HitList.ROW_LINES)
        self.action_move(direction * rows_per_page)

    def help_entries(self) -> list[tuple[str, str]]:
        """Return the keys of this screen and what each does, as the help screen lists them."""
        prints = getattr(self.app, "prints", "id")
        return _help_entries(self.BINDINGS, {"choose": CHOOSE_HELP.get(prints, "")})

    def action_help(self) -> None:
        """List every key and what it does."""
        self.app.push_screen(HelpScreen("Keys", self.help_entries()))

    def action_choose(self) -> None:
        """Leave, printing the highlighted session's id."""
        row = self.current_row()
        if row is None:
            self.app.bell()
            return
        self.app.exit(row.session_id)

    def action_escape(self) -> None:
        """Clear the query; with an empty query, leave without choosing."""
        box = self.query_one("#query", Input)
        if box.value:
            box.value = ""
        else:
            self.app.exit(None)

    def action_toggle_view(self) -> None:
        """Switch between one row per hit and one row per session."""
        self.view = browse.cycled(self.view, browse.VIEWS)
        self._draw_filters()
        row = self.current_row()
        self._request(keep=row.session_id if row else None)

    def action_cycle(self, which: str) -> None:
        """Change one filter to its next value."""
        f = self.filters
        first = self.initial_filters
        if which == "source":
            choices = [(), *((s,) for s in self._sources())]
            value = browse.cycled(f.sources, browse.with_initial(first.sources, choices))
            self.filters = replace(f, sources=value)
        elif which == "role":
            choices = [(), *((r,) for r in browse.ROLES)]
            value = browse.cycled(f.roles, browse.with_initial(first.roles, choices))
            self.filters = replace(f, roles=value)
        elif which == "since":
            choices = browse.with_initial(first.since, browse.SINCE_CHOICES)
            self.filters = replace(f, since=browse.cycled(f.since, choices))
        else:
            self.filters = replace(f, scope=browse.cycled(f.scope, browse.SCOPES))
        self._draw_filters()
        self._request()

    def _sources(self) -> list[str]:
        try:
            return self.browser.sources()
        except BrowseError as exc:
            self.notify(render.visible(str(exc), newlines=False), severity="error", markup=False)
            return []

    def action_refresh(self) -> None:
        """Read the store again (new messages from a running gateway appear)."""
        self.changed = False
        self._marker = self.browser.changed_marker()
        row = self.current_row()
        self._request(keep=row.session_id if row else None)

    def action_expand(self) -> None:
        """Show tool calls and reasoning in full in the preview, or collapse them."""
        self.expanded = not self.expanded
        self._preview_of(self.current_row())

    def action_open(self) -> None:
        """Open the highlighted session's whole transcript."""
        row = self.current_row()
        if row is None:
            self.app.bell()
            return
        self.app.push_screen(
            TranscriptScreen(self.browser, row, expanded=self.expanded, pattern=self._pattern)
        )

    # edits: each is confirmed, then runs through the library in a worker

    def _naming(self, verb: str, row: Row, tail: str = "?") -> Text:
        text = Text(f"{verb} session ")
        text.append(browse.flat(row.session_id), style="bold")
        text.append(" (" + browse.session_label(row.session) + ")")
        text.append(tail)
        return text

    def _refused(self, row: Row) -> bool:
        """Say on the screen that a vaulted session is not changed here; True when refused."""
        notice = browse.vault_refusal(row)
        if notice is None:
            return False
        self.notices.append(notice)
        self.notify(notice, severity="warning", timeout=8, markup=False)
        return True

    def _run_edit(self, row: Row, work: Callable[[], Any], success: Callable[[Any], str]) -> None:
        self.busy = "waiting for the store…"
        self._draw_status()

        def attempt() -> Any:
            try:
                return work()
            except BrowseError as exc:
                return exc

        def done(outcome: Any) -> None:
            self.busy = ""
            if isinstance(outcome, BrowseError):
                notice = "Error: " + render.visible(str(outcome), newlines=False)
                self.notices.append(notice)
                self.notify(notice, severity="error", timeout=8, markup=False)
                self._draw_status()
                return
            notice = success(outcome)
            self.notices.append(notice)
            self.notify(notice, markup=False)  # stored titles are data, not markup
            self._marker = self.browser.changed_marker()  # our own write is no news
            self._request(keep=row.session_id)

        self._edit.submit(attempt, done)

    def action_rename(self) -> None:
        """Give the highlighted session a new title."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        current = row.session.get("title") or ""

        def answered(title: str | None) -> None:
            if title is None:
                return
            self._run_edit(
                row,
                lambda: self.browser.rename(row.session_id, title),
                lambda stored: f"Renamed to: {browse.flat(stored)}" if stored else "Title cleared.",
            )

        question = self._naming("New title for", row, ":")
        self.app.push_screen(AskScreen(question, render.visible(current)), answered)

    def action_export(self) -> None:
        """Write the highlighted session to a new .jsonl or .md file."""
        row = self.current_row()
        if row is None:
            return
        safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in row.session_id)
        suggestion = str(Path.cwd() / f"{safe_name or 'session'}.jsonl")

        def answered(path: str | None) -> None:
            if not path:
                return
            self._run_edit(
                row,
                lambda: self.browser.export(row.session_id, path, row.vault),
                lambda done: f"Exported {done[1]} messages to {browse.flat(str(done[0]))}",
            )

        question = self._naming("Export", row, " to (.jsonl, or .md for Markdown):")
        self.app.push_screen(AskScreen(question, suggestion), answered)

    def action_pin(self) -> None:
        """Pin the highlighted session (prune keeps it), or unpin it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        pinned = bool(row.session.get("pinned"))
        verb = "Unpin" if pinned else "Pin"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_pinned(row.session_id, not pinned),
                    lambda ok: f"{verb}ned {browse.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_archive(self) -> None:
        """Archive the highlighted session (hidden from listings), or unarchive it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        archived = bool(row.session.get("archived"))
        verb = "Unarchive" if archived else "Archive"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.set_archived(row.session_id, not archived),
                    lambda ok: f"{verb}d {browse.flat(row.session_id)}" if ok else "Gone.",
                )

        self.app.push_screen(ConfirmScreen(self._naming(verb, row)), answered)

    def action_delete(self) -> None:
        """Delete the highlighted session, exactly that id, after a confirmation naming it."""
        row = self.current_row()
        if row is None or self._refused(row):
            return
        msgs = row.session.get("message_count") or 0
        pinned = " It is PINNED." if row.session.get("pinned") else ""
        question = self._naming(
            "Delete", row, f" and its {msgs} messages?{pinned} This cannot be undone."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_edit(
                    row,
                    lambda: self.browser.delete(row.session_id),
                    lambda n: f"Deleted {browse.flat(row.session_id)} ({n} messages)",
                )

        self.app.push_screen(ConfirmScreen(question, danger=True), answered)


class BrowseApp(App[str | None]):
    """`hermes sessions browse`: returns the chosen session id, or None when quit."""

    TITLE = "hermes sessions browse"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q,ctrl+c", "quit", "Quit", show=False, priority=True),
    ]
    CSS = """
    #searchbar { height: 1; }
    #prompt { width: auto; }
    #query { border: none; height: 1; padding: 0 1; width: 1fr; }
    #filters { height: auto; padding: 0 1; }
    #panes { height: 1fr; }
    #list { width: 1fr; height: 1fr; border: none; padding: 0; scrollbar-size-vertical: 1; }
    #side { width: 1fr; height: 1fr; border-left: solid $primary-darken-2; }
    #preview-head {
        height: 2; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    #preview {
        height: 1fr; padding: 0 0 0 1; scrollbar-size-vertical: 1; background: $surface;
    }
    .narrow #panes { layout: vertical; }
    .narrow #list { width: 1fr; height: 1fr; }
    .narrow #side {
        width: 1fr; height: 1fr; border-left: none; border-top: solid $primary-darken-2;
    }
    #status { height: 1; padding: 0 1; background: $panel; }
    .keys { height: 1; }
    #transcript { height: 1fr; padding: 0 0 0 1; }
    #transcript-head, #transcript-status { padding: 0 1; }
    #transcript-head { height: 2; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    #transcript-status { height: 1; background: $panel; }
    ConfirmScreen, AskScreen, HelpScreen { align: center middle; }
    .dialog.help { width: 90%; max-width: 100; height: auto; max-height: 90%; padding: 0 1; }
    #help-keys { height: auto; margin-top: 1; }
    #help-more { height: 1; }
    .dialog {
        width: 80%; max-width: 90; height: auto; padding: 1 2;
        border: thick $primary; background: $surface;
    }
    .dialog .buttons { height: auto; margin-top: 1; }
    .dialog Button { margin-right: 2; }
    .dialog Input { margin-top: 1; }
    """

    def __init__(self, browser: Browser, *, initial: Results, prints: str = "id") -> None:
        super().__init__()
        self.browser = browser
        self.initial = initial
        self.prints = prints  # what Enter prints: "id", or "resume" (Hermes Agent's line)

    def get_default_screen(self) -> Screen[Any]:
        return BrowseScreen(self.browser, self.initial)
