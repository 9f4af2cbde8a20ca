"""bench/run.py's raw baselines compute the library's exact answers (ratios compare like with like).

A search row's ratio is only meaningful if its raw SQL returns our hits, and the import row's if
the raw import ends with the same rows and index entries; these run both on a small generated
store (large enough that the common term has more matches than search ranks).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.children import child_env

from hermes_state.search import search, walk
from hermes_state.store.connection import open_store
from hermes_state.transfer import export, portability

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = REPO_ROOT / "bench"
MESSAGES = 6000  # the common term then matches more rows than walk.RANK_CANDIDATES


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """bench/run.py imported as a module."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("run")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded bench store of MESSAGES messages."""
    out = tmp_path_factory.mktemp("bench") / "store"
    env = child_env()
    argv = [sys.executable, str(BENCH / "generate.py"), "--messages", str(MESSAGES)]
    subprocess.run(
        [*argv, "--out", str(out), "--quiet"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out / "state.db"


def test_bench_rank_window_is_the_one_search_ranks(bench: ModuleType) -> None:
    assert bench.RANK_WINDOW == walk.RANK_CANDIDATES


@pytest.mark.parametrize(
    ("query", "sql", "ordering"),
    [
        ("quetzal", "RAW_WORD_RECENT_SQL", "rank"),
        ("checkpoint", "RAW_WORD_RECENT_SQL", "rank_recent"),
        ("etzal", "RAW_TRIGRAM_SQL", "newest"),
        ("会議", "RAW_CJK_SQL", None),
    ],
    ids=["selective", "common", "substring", "cjk"],
)
def test_raw_search_sql_returns_the_library_hits(
    bench: ModuleType, generated: Path, query: str, sql: str, ordering: str | None
) -> None:
    from hermes_state.store import cjk

    params = {
        "RAW_WORD_RECENT_SQL": (query,),
        "RAW_TRIGRAM_SQL": (f'"{query}"', query),
        "RAW_CJK_SQL": (cjk.cjk_match_expr(query), query),
    }[sql]
    with open_store(generated, read_only=True) as store:
        hits = search.search_messages(store, query, limit=20)
        raw = [r[0] for r in store.conn.execute(getattr(bench, sql), params)]
    assert hits and [h["id"] for h in hits] == raw
    if ordering is not None:
        assert hits.ordering == ordering


def test_raw_import_ends_with_the_rows_and_index_entries_of_ours(
    bench: ModuleType, generated: Path, tmp_path: Path
) -> None:
    src = tmp_path / "export.jsonl"
    with open_store(generated, read_only=True) as store, open(src, "w", encoding="utf-8") as fh:
        export.write_jsonl(export.export_all(store), fh)
    ours = tmp_path / "ours" / "state.db"
    ours.parent.mkdir()
    with open_store(ours) as store:
        assert portability.import_sessions(store, src).errors == []
    raw = tmp_path / "raw" / "state.db"
    raw.parent.mkdir()
    open_store(raw).close()
    bench._raw_import(raw, src)
    counts = bench._store_counts(ours)
    assert counts[1] == MESSAGES
    assert counts == bench._store_counts(raw)
