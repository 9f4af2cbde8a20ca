"""The packages' imports only point down: the layers below, read from the source (no cycles).

``hermes_state`` is a stack of subpackages (``PACKAGES``, bottom first): a module may import
modules of its own package or of packages below it. Inside the stack each module belongs to one
layer (``LAYERS``) and may import (at run time, at the top or inside a function) only modules of
lower layers, so no cycle exists anywhere. ``TYPE_CHECKING`` imports are annotations, not
dependencies, and are left out. ``hermes_cli`` sits above the whole library, never the reverse,
and is a stack of its own (``CLI_PACKAGES``, ``CLI_LAYERS``) under the same rules.
"""

from __future__ import annotations

import ast
import functools
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
        "vault_bm25",
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
    {"migrations", "routes"},
    {"connection", "walk"},
    {"snapshot", "diagnosis", "usage_report", "vault_stores", "hits", "bulk_unindex"},
    {
        "sessions",
        "session_list",
        "transcript",
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
        "export",
        "recover_scan",
        "recover_pages",
        "recover_crosscheck",
        "recover_whole",
        "conversation",
        "rewind",
        "message_windows",
    },
    {"import_records"},
    {"import_write"},
    {"portability"},
    {"deletion", "store_check"},
    {
        "listing",
        "prune",
        "reclaim",
        "ownership",
        "stats",
        "recover",
        "import_batch",
        "title_search",
    },
    {"migrate", "cjk_index"},
    {"profile_stores"},
    {
        "gateway",
        "telegram_topics",
        "vault",
        "watch_snapshot",
        "vault_verify",
        "vault_plan",
        "vault_list",
    },
    {"vault_layout", "vault_copy", "vault_check"},
    {"vault_move", "vault_return"},
    {"vault_export"},
    {"archive_format"},
    {"archives", "archive_check"},
    {"backup", "restore_plan"},
    {"restore_apply"},
    {"vault_search", "restore", "vault_import", "footprint"},
    {"replica"},
    {"replica_status"},
    {"handle", "delete_guards", "exports"},
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


# The CLI's subpackages, bottom first: output, shared helpers, the full-screen apps, the command
# groups, completion and the generated docs' sources, the MCP server; the entry points on top.
CLI_PACKAGES = [
    "rendering",
    "shared",
    "apps",
    "commands",
    "completion",
    "mcp",
    "",  # hermes_cli itself: main (the app), __main__, docs (regenerates docs from the app)
]

# Bottom first, as LAYERS: a CLI module may import modules of earlier layers only.
CLI_LAYERS: list[set[str]] = [
    {
        "sanitize",
        "records",
        "agent_command",
        "argv",
        "durations",
        "environment",
        "exitcodes",
        "logfile",
        "machines",
        "targets",
        "mcp_stdio",
    },
    {"output", "complete"},
    {"layout", "options"},
    {"render", "pager", "browse_model", "command_docs", "sessions_options"},
    {
        "session_views",
        "store_views",
        "waiting",
        "browse_text",
        "watch_views",
        "shell_scripts",
        "man_page",
        "profile",
    },
    {"stores", "browse_widgets", "watch_app", "replicate", "generators", "readme_tables"},
    {
        "browse_store",
        "watch",
        "backup",
        "db",
        "usage",
        "vault",
        "completion_install",
        "mcp_calls",
        "sessions_import",
        "sessions_list",
        "sessions_search",
        "sessions_stats",
    },
    {"browse_transcript", "mcp_schemas", "sessions_edit", "sessions_prune", "sessions_show"},
    {"browse_app", "mcp_tools"},
    {"browse", "mcp_server"},
    {"sessions_browse", "mcp_command"},
    {"sessions"},
    {"main"},
    {"__main__", "docs", "__init__"},
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
    """Map each module of a package to the package modules it imports at run time (a fresh
    copy: tests add imports to it)."""
    return dict(_parsed_imports(package))


@functools.cache
def _parsed_imports(package: str) -> dict[str, set[str]]:
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


def upward_package_imports(
    imports: dict[str, set[str]], packages: list[str] = PACKAGES
) -> list[str]:
    """Return 'a -> b' for every import that points to a package above the importer's."""
    rank = {name: i for i, name in enumerate(packages)}
    bad = []
    for module, targets in sorted(imports.items()):
        for target in sorted(targets):
            if rank[_package(target)] > rank[_package(module)]:
                bad.append(f"{module} -> {target}")
    return bad


def test_the_library_packages_are_the_map() -> None:
    found = {_package(name) for name in module_paths("hermes_state")}
    assert sorted(found) == sorted(PACKAGES)


@pytest.mark.parametrize("package", ["hermes_state", "hermes_cli"])
def test_subpackage_inits_import_nothing(package: str) -> None:
    """A subpackage's __init__ is its docstring: importing one module never loads its siblings."""
    for name, path in module_paths(package).items():
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


# --- the CLI's own stack ----------------------------------------------------------------------


def test_the_cli_packages_are_the_map() -> None:
    found = {_package(name) for name in module_paths("hermes_cli")}
    assert sorted(found) == sorted(CLI_PACKAGES)


def test_cli_module_names_are_unique() -> None:
    """CLI_LAYERS names modules by their file name, so no two CLI modules may share one."""
    stems = [_stem(n) for n in module_paths("hermes_cli") if not n.endswith(".__init__")]
    assert sorted(s for s in set(stems) if stems.count(s) > 1) == []


def test_every_cli_module_has_a_layer() -> None:
    placed = set().union(*CLI_LAYERS)
    stems = {_stem(name) for name in imports_of("hermes_cli") if not name.endswith(".__init__")}
    assert sorted(stems - placed) == []
    assert sorted(placed - stems - {"__init__"}) == []  # no layer names a module that is gone


def test_cli_packages_only_point_down() -> None:
    assert upward_package_imports(imports_of("hermes_cli"), CLI_PACKAGES) == []


def test_cli_imports_only_point_down() -> None:
    """No cycle in the CLI, lazy imports (inside functions) included."""
    assert upward_imports(imports_of("hermes_cli"), CLI_LAYERS) == []


@pytest.mark.parametrize(
    ("importer", "source"),
    [
        # The cycle issue 36 removed: the completion command importing the app it belongs to.
        (
            "completion.completion_install",
            "def generated(target):\n    from hermes_cli.main import get_command\n",
        ),
        # Drawing reaching back for the screen that draws it, or a screen for its command.
        ("apps.browse_text", "from hermes_cli.apps import browse_app\n"),
        ("apps.watch_app", "def f():\n    from hermes_cli.apps.watch import watch\n"),
    ],
)
def test_an_upward_cli_import_is_caught(importer: str, source: str) -> None:
    imports = imports_of("hermes_cli")
    added = _runtime_imports(ast.parse(source), "hermes_cli", set(imports))
    assert len(added) == 1
    imports[importer] = imports[importer] | added
    level = {m: i for i, layer in enumerate(CLI_LAYERS) for m in layer}
    a, b = _stem(importer), _stem(next(iter(added)))
    assert upward_imports(imports, CLI_LAYERS) == [
        f"{a} (layer {level[a]}) -> {b} (layer {level[b]})"
    ]


def test_an_upward_cli_package_import_is_caught() -> None:
    imports = imports_of("hermes_cli")
    source = "def f():\n    from hermes_cli.mcp import mcp_server\n"
    added = _runtime_imports(ast.parse(source), "hermes_cli", set(imports))
    imports["commands.usage"] = imports["commands.usage"] | added
    assert upward_package_imports(imports, CLI_PACKAGES) == ["commands.usage -> mcp.mcp_server"]


def test_the_cli_runs_no_sql_of_its_own() -> None:
    """hermes_cli parses, calls the library and renders: no connection use, no statements."""
    offenders = []
    for path in module_paths("hermes_cli").values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany", "conn"):
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert offenders == []
