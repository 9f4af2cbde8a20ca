"""`hermes sessions browse`: the full-transcript screen, its messages wrapped only as they come
into view (imported only when the command runs)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from hermes_cli.apps import browse_model, browse_text
from hermes_cli.apps.browse_model import BrowseError, Row
from hermes_cli.apps.browse_store import Browser
from hermes_cli.apps.browse_widgets import (
    CHOOSE_HELP,
    FittedLine,
    HelpScreen,
    binding_help,
    key_parts,
)

if TYPE_CHECKING:
    pass

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
            text = browse_text.message_text(
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
        yield Static(browse_text.session_header(self.row.session), id="transcript-head")
        yield TranscriptView(expanded=self.expanded, pattern=self.pattern, id="transcript")
        yield FittedLine(
            browse_text.transcript_parts(None, 0, loaded=False), id="transcript-status"
        )
        yield FittedLine(key_parts(self.BINDINGS), sep=" ", classes="keys")

    def on_mount(self) -> None:
        self.run_worker(self._load, thread=True, group="transcript")

    def _load(self) -> None:
        batch: list[dict[str, Any]] = []
        size = browse_model.TRANSCRIPT_FIRST  # a small first batch: the first screen comes at once
        try:
            for msg in self.browser.transcript(self.row.session_id, self.row.vault):
                batch.append(msg)
                if len(batch) >= size:
                    self.app.call_from_thread(self._append, batch)
                    batch, size = [], browse_model.TRANSCRIPT_CHUNK
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
        parts = browse_text.transcript_parts(
            view.visible_range(), len(view.messages), loaded=self.loaded, error=self.error
        )
        self.query_one("#transcript-status", FittedLine).update(parts)

    def help_entries(self) -> list[tuple[str, str]]:
        """Return the keys of this screen and what each does, as the help screen lists them."""
        prints = getattr(self.app, "prints", "id")
        return binding_help(self.BINDINGS, {"choose": CHOOSE_HELP.get(prints, "")})

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
