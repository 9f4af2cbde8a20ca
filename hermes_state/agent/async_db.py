"""The agent's asynchronous door onto SessionDB: each call runs in a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_state.agent.db import SessionDB


class AsyncSessionDB:
    """Wrap a SessionDB so that ``await adb.method(...)`` never blocks the event loop."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._db, name)
        if not callable(attr):
            return attr
        return _offloaded(attr)


def _offloaded(fn: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return call
