"""SQLite's own facts and the small text helpers every statement builder needs.

One home for: the file header's magic, the names of a database's companion files, identifier
quoting, placeholder lists, chunking of long parameter lists and LIKE escaping.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SQLITE_MAGIC = b"SQLite format 3\x00"

# The files SQLite keeps beside a database: a rollback journal, a WAL and its shared-memory index.
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
# The database itself first, then its companions: the files that together are one store.
STORE_FILE_SUFFIXES = ("", *SIDECAR_SUFFIXES)

# Under the variable limit of SQLite builds before 3.32 (999), so a statement with two IN-lists of
# one chunk each still prepares everywhere.
CHUNK = 450

LIKE_ESCAPE = "\\"


def quote(name: str) -> str:
    """Quote an SQL identifier, doubling any quote inside it."""
    return '"' + name.replace('"', '""') + '"'


def marks(count: int) -> str:
    """Return `count` comma-separated `?` placeholders."""
    return ", ".join("?" * count)


def chunks(items: Iterable[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield items in lists of at most `size`, for `IN (...)` parameter lists."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def escape_like(text: str) -> str:
    """Escape LIKE's wildcards in text, for a pattern used with `ESCAPE '\\'`."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def companion(path: Path, suffix: str) -> Path:
    """Return the path of a database's companion file (suffix "-wal", "-shm" or "-journal")."""
    return Path(str(path) + suffix)


def store_files(path: Path, suffixes: Sequence[str] = STORE_FILE_SUFFIXES) -> list[Path]:
    """Return the database path and its companions' paths (existing or not)."""
    return [companion(path, s) for s in suffixes]


def file_uri(path: Path) -> str:
    """Return path as an SQLite ``file:`` URI: any bytes, quoted (a name that is not UTF-8
    cannot be bound as text; its URI can, on a connection opened with uri=True)."""
    from urllib.parse import quote as url_quote

    return "file:" + url_quote(os.fsencode(Path(path).absolute()))
