"""The packages' imports only point down: the layers below, read from the source (no cycles).

Each module of ``hermes_state`` belongs to one layer; it may import (at run time, at the top or
inside a function) only modules of lower layers. ``TYPE_CHECKING`` imports are annotations, not
dependencies, and are left out. ``hermes_cli`` sits above the whole library, never the reverse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Bottom first. A module may import modules of earlier layers only.
LAYERS: list[set[str]] = [
    {"sql", "releases"},
    {
        "errors",
        "guard",
        "text",
        "content",
        "meta",
        "journal",
        "lockowners",
        "pages",
        "workdirs",
        "rows",
        "schema",
        "values",
        "model_config",
        "transcripts",
        "vault_twins",
    },
    {
        "home",
        "fts",
        "salvage",
        "lost_and_found",
        "lineage",
        "prune_filters",
        "sessions_json",
        "page_header",
    },
    {"cjk", "recover_report", "bulkload"},
    {"layout", "query", "store_objects", "recover_expect"},
    {"migrations"},
    {"connection"},
    {"snapshot", "diagnosis", "usage_report", "vault_stores"},
    {
        "sessions",
        "recover_source",
        "repair",
        "compression_state",
        "workspace",
        "handoff",
        "auto_maintenance",
        "import_target",
    },
    {"import_ids"},
    {
        "messages",
        "ledger",
        "usage",
        "search",
        "recover_target",
        "recover_verify",
        "redact",
    },
    {
        "compression",
        "portability",
        "recover_scan",
        "recover_pages",
        "recover_crosscheck",
        "recover_whole",
        "conversation",
        "rewind",
    },
    {"listing", "maintenance", "ownership", "stats", "recover", "import_batch", "title_search"},
    {"profile_stores"},
    {"gateway", "telegram_topics", "vault", "watch_snapshot"},
    {"backup"},
    {"vault_search", "restore", "vault_import", "footprint"},
    {"replica"},
    {"replica_status"},
    {"db", "__init__", "pytest_plugin", "async_db"},
]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, package: str) -> set[str]:
    """Return the modules of package a module imports at run time (TYPE_CHECKING left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == package:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(package + "."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package + "."):
                    found.add(alias.name.split(".")[1])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(package: str) -> dict[str, set[str]]:
    """Map each module of a package to the package modules it imports at run time."""
    out = {}
    for path in sorted((REPO_ROOT / package).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out[path.stem] = _runtime_imports(tree, package) - {path.stem}
    return out


def upward_imports(imports: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """Return 'a -> b' for every import that does not point to a lower layer."""
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    bad = []
    for module, targets in sorted(imports.items()):
        for target in sorted(targets):
            if target in level and level[target] >= level[module]:
                bad.append(f"{module} (layer {level[module]}) -> {target} (layer {level[target]})")
    return bad


def test_every_library_module_has_a_layer() -> None:
    placed = set().union(*LAYERS)
    assert sorted(set(imports_of("hermes_state")) - placed) == []


def test_library_imports_only_point_down() -> None:
    assert upward_imports(imports_of("hermes_state"), LAYERS) == []


def test_the_library_never_imports_the_cli() -> None:
    for path in sorted((REPO_ROOT / "hermes_state").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert _runtime_imports(tree, "hermes_cli") == set(), path.name


@pytest.mark.parametrize(
    "source",
    [
        "from hermes_state import messages\n",
        "def f():\n    from hermes_state.messages import insert_messages\n",
    ],
)
def test_an_upward_import_is_caught(source: str) -> None:
    imports = imports_of("hermes_state")
    imports["sessions"] = imports["sessions"] | _runtime_imports(ast.parse(source), "hermes_state")
    level = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    want = f"sessions (layer {level['sessions']}) -> messages (layer {level['messages']})"
    assert upward_imports(imports, LAYERS) == [want]


def test_an_annotation_only_import_is_not_a_dependency() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hermes_state import db\n"
    )
    assert _runtime_imports(ast.parse(source), "hermes_state") == set()


def test_the_cli_runs_no_sql_of_its_own() -> None:
    """hermes_cli parses, calls the library and renders: no connection use, no statements."""
    offenders = []
    for path in sorted((REPO_ROOT / "hermes_cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany", "conn"):
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert offenders == []
