"""`hermes sessions browse`: the widgets and dialogs of its screens (the hit list, fitted lines,
the keys bar, help, confirm and ask dialogs, and the worker lanes), imported only when it runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Size
from textual.message import Message
from textual.screen import ModalScreen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Button, Input, Static

from hermes_cli.apps import browse_text
from hermes_cli.apps.browse_model import Row

if TYPE_CHECKING:
    pass


class Lane:
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
            lines = browse_text.row_lines(self.rows[index], inner, now=self._now)
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
    least important parts go (see browse_text.fitted)."""

    DEFAULT_CSS = "FittedLine { height: 1; }"

    def __init__(
        self,
        parts: list[browse_text.Part] | None = None,
        *,
        sep: str = " · ",
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.parts = list(parts or [])
        self.sep = sep

    def update(self, parts: list[browse_text.Part]) -> None:
        """Show these parts instead."""
        self.parts = list(parts)
        self.refresh()

    @property
    def text(self) -> Text:
        """Return the line as drawn at the current width."""
        return browse_text.fitted(self.parts, self.content_size.width or None, self.sep)

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


def key_parts(bindings: list[BindingType]) -> list[browse_text.Part]:
    """Return the keys bar: each shown binding's first key and what it does; Help and Quit
    always stay, the others go from the last when the bar is narrow."""
    shown = [b for b in bindings if isinstance(b, Binding) and b.show]
    return [
        browse_text.Part(
            (binding.description,),
            priority=-i,
            droppable=binding.action not in ALWAYS_SHOWN,
            label=key_label(binding.key.split(",")[0]),
            label_style="bold reverse",
        )
        for i, binding in enumerate(shown)
    ]


def binding_help(
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
