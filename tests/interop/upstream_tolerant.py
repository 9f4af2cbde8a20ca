"""Pytest plugin: a name ``hermes_state`` lacks fails only the tests that use it, not the file.

Loaded with ``-p upstream_tolerant`` (its directory on PYTHONPATH) into the interpreter of the
implementation under test, so it must import nothing from this repository. Without it, one
missing name in a test module's top-level ``from hermes_state import …`` would make every test
of that module an error, hiding what the implementation does support.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NoReturn

import hermes_state

TARGET = "hermes_state"


class MissingName:
    """Stands in for a name the implementation lacks; any use of it raises AttributeError."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_missing_name", name)

    def _fail(self) -> NoReturn:
        name = object.__getattribute__(self, "_missing_name")
        raise AttributeError(f"module {TARGET!r} has no attribute {name!r} (upstream_tolerant)")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail()

    def __getattr__(self, item: str) -> NoReturn:
        self._fail()

    # Compared or tested for truth, a placeholder must fail too: `x != MISSING` would pass.
    def __eq__(self, other: object) -> NoReturn:
        self._fail()

    def __ne__(self, other: object) -> NoReturn:
        self._fail()

    def __bool__(self) -> NoReturn:
        self._fail()

    __hash__ = object.__hash__  # still usable as a key by tools that collect module globals

    def __repr__(self) -> str:
        return f"<missing {TARGET}.{object.__getattribute__(self, '_missing_name')}>"


def tolerant_getattr(module: Any, previous: Callable[[str], Any] | None) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` that falls back to submodules, then to a placeholder."""
    is_package = hasattr(module, "__path__")

    def __getattr__(name: str) -> Any:
        if previous is not None:
            try:
                return previous(name)
            except AttributeError:
                pass
        # Dunders are probed by the import system and tools; a placeholder would mislead them.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {TARGET!r} has no attribute {name!r}")
        if is_package:
            # A real submodule must win: `from hermes_state import guard` asks getattr first.
            try:
                return importlib.import_module(f"{TARGET}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{TARGET}.{name}":
                    raise  # the submodule exists but an import inside it is broken
        return MissingName(name)

    return __getattr__


def install(module: Any) -> None:
    """Give the module the tolerant ``__getattr__``, chained to the one it already has."""
    previous = vars(module).get("__getattr__")
    module.__getattr__ = tolerant_getattr(module, previous)


install(hermes_state)
