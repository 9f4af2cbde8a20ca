"""The packages' imports only point down: the layers below, read from the source (no cycles).

``hermes_state`` is a stack of subpackages (``PACKAGES``, bottom first): a module may import
modules of its own package or of packages below it. Inside the stack each module belongs to one
layer (``LAYERS``) and may import (at run time, at the top or inside a function) only modules of
lower layers, so no cycle exists anywhere. ``TYPE_CHECKING`` imports are annotations, not
dependencies, and are left out. ``hermes_cli`` sits above the whole library, never the reverse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The library's subpackages, bottom first (the README's map says what each holds).
PACKAGES = [
    "shapes",
    "store",
    "records",
    "search",
    "transfer",
    "recover",
    "upkeep",
    "reports",
    "vault",
    "backups",
    "agent",
    "",  # hermes_state itself: __init__ and the pytest plugin
]

# Bottom first. A module may import modules of earlier layers only.
LAYERS: list[set[str]] = [
    {"sql", "releases", "triggers"},
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
        "store_file",
    },
    {"cjk", "recover_report", "bulkload", "patience"},
    {"layout", "query", "store_objects", "recover_expect"},
    {"migrations"},
    {"connection"},
    {"snapshot", "diagnosis", "usage_report", "vault_stores"},
    {
        "sessions",
        "session_list",
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
        "message_windows",
    },
    {"listing", "maintenance", "ownership", "stats", "recover", "import_batch", "title_search"},
    {"profile_stores"},
    {"gateway", "telegram_topics", "vault", "watch_snapshot"},
    {"backup"},
    {"vault_search", "restore", "vault_import", "footprint"},
    {"replica"},
    {"replica_status"},
    {"handle", "deletion", "exports"},
    {
        "session_methods",
        "gateway_methods",
        "compression_methods",
        "ledger_methods",
        "listing_methods",
        "usage_methods",
        "message_methods",
        "upkeep_methods",
        "transfer_methods",
    },
    {"db", "__init__", "pytest_plugin", "async_db"},
]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_paths(package: str) -> dict[str, Path]:
    """Map each module of a package (subpackages included) to its file, keyed by dotted path."""
    root = REPO_ROOT / package
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts)] = path
    return out


def _runtime_imports(tree: ast.AST, package: str, known: set[str]) -> set[str]:
    """Return the modules of package (dotted, package left off) imported at run time."""
    found: set[str] = set()

    def add(dotted: str) -> None:
        # "store" (a subpackage) is its __init__; "store.fts" the module.
        found.add(dotted if dotted in known else f"{dotted}.__init__")

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == package or node.module.startswith(package + "."):
                base = node.module[len(package) + 1 :]
                for alias in node.names:
                    dotted = f"{base}.{alias.name}" if base else alias.name
                    if dotted in known:
                        found.add(dotted)
                    elif base:
                        add(base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package + "."):
                    add(alias.name[len(package) + 1 :])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(package: str) -> dict[str, set[str]]:
    """Map each module of a package to the package modules it imports at run time."""
    paths = module_paths(package)
    known = set(paths)
    out = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own_init = name.rsplit(".", 1)[0] + ".__init__" if "." in name else "__init__"
        out[name] = _runtime_imports(tree, package, known) - {name, own_init}
    return out


def _stem(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]


def _package(dotted: str) -> str:
    return dotted.split(".")[0] if "." in dotted else ""


def upward_imports(imports: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """Return 'a -> b' for every import that does not point to a lower layer."""
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    bad = []
    for module, targets in sorted(imports.items()):
        if module.endswith("__init__") and module != "__init__":
            continue  # a subpackage's __init__ is a docstring (checked below)
        for target in sorted(targets):
            a, b = _stem(module), _stem(target)
            if b in level and a in level and level[b] >= level[a]:
                bad.append(f"{a} (layer {level[a]}) -> {b} (layer {level[b]})")
    return bad


def upward_package_imports(imports: dict[str, set[str]]) -> list[str]:
    """Return 'a -> b' for every import that points to a package above the importer's."""
    rank = {name: i for i, name in enumerate(PACKAGES)}
    bad = []
    for module, targets in sorted(imports.items()):
        for target in sorted(targets):
            if rank[_package(target)] > rank[_package(module)]:
                bad.append(f"{module} -> {target}")
    return bad


def test_the_library_packages_are_the_map() -> None:
    found = {_package(name) for name in module_paths("hermes_state")}
    assert sorted(found) == sorted(PACKAGES)


def test_subpackage_inits_import_nothing() -> None:
    """A subpackage's __init__ is its docstring: importing one module never loads its siblings."""
    for name, path in module_paths("hermes_state").items():
        if name.endswith(".__init__"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            assert [type(n).__name__ for n in tree.body] == ["Expr"], name


def test_library_packages_only_point_down() -> None:
    assert upward_package_imports(imports_of("hermes_state")) == []


def test_every_library_module_has_a_layer() -> None:
    placed = set().union(*LAYERS)
    stems = {_stem(name) for name in imports_of("hermes_state") if not name.endswith(".__init__")}
    assert sorted(stems - placed) == []


def test_library_imports_only_point_down() -> None:
    assert upward_imports(imports_of("hermes_state"), LAYERS) == []


def test_the_library_never_imports_the_cli() -> None:
    cli = set(module_paths("hermes_cli"))
    for path in module_paths("hermes_state").values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert _runtime_imports(tree, "hermes_cli", cli) == set(), path.name


@pytest.mark.parametrize(
    "source",
    [
        "from hermes_state.records import messages\n",
        "def f():\n    from hermes_state.records.messages import insert_messages\n",
    ],
)
def test_an_upward_import_is_caught(source: str) -> None:
    imports = imports_of("hermes_state")
    known = set(imports)
    added = _runtime_imports(ast.parse(source), "hermes_state", known)
    imports["records.sessions"] = imports["records.sessions"] | added
    level = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    want = f"sessions (layer {level['sessions']}) -> messages (layer {level['messages']})"
    assert upward_imports(imports, LAYERS) == [want]


def test_an_upward_package_import_is_caught() -> None:
    imports = imports_of("hermes_state")
    source = "def f():\n    from hermes_state.vault import vault_stores\n"
    added = _runtime_imports(ast.parse(source), "hermes_state", set(imports))
    imports["store.connection"] = imports["store.connection"] | added
    assert upward_package_imports(imports) == ["store.connection -> vault.vault_stores"]


def test_an_annotation_only_import_is_not_a_dependency() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hermes_state import db\n"
    )
    assert (
        _runtime_imports(ast.parse(source), "hermes_state", set(imports_of("hermes_state")))
        == set()
    )


def test_the_cli_runs_no_sql_of_its_own() -> None:
    """hermes_cli parses, calls the library and renders: no connection use, no statements."""
    offenders = []
    for path in module_paths("hermes_cli").values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany", "conn"):
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert offenders == []
