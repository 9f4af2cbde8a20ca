"""The README's map is the code's: every subpackage, what it imports, and its modules."""

from __future__ import annotations

import re

from test_layers import CLI_PACKAGES, PACKAGES, REPO_ROOT, _package, imports_of, module_paths

IMPORTS_COLUMN = 68  # where the map's "imports" column starts


def _architecture() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Architecture")
    return text[start : text.index("\n## ", start + 1)]


def _map_imports(root: str) -> dict[str, set[str]]:
    """Return each subpackage of root the map names, with the packages its column lists."""
    block = _architecture().split("```\n")[1]
    out: dict[str, set[str]] = {}
    current: str | None = None
    inside = False
    for line in block.splitlines():
        if not line.startswith(" "):
            inside = line.startswith(root + "/")
            current = None
            continue
        if not inside:
            continue
        name = re.match(r"  (\w+)/", line)
        if name:
            current = name.group(1)
            out[current] = set()
        elif re.match(r"  \S", line):
            current = None  # a module of the package itself (__init__.py, main.py)
        if current is not None:
            out[current].update(w for w in line[IMPORTS_COLUMN:].split() if w != "-")
    return out


def _code_imports(root: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in imports_of(root).items():
        if _package(module):
            out.setdefault(_package(module), set()).update(
                _package(t) for t in targets if _package(t) not in ("", _package(module))
            )
    return out


def test_the_map_names_every_library_subpackage_in_order_with_what_it_imports() -> None:
    mapped = _map_imports("hermes_state")
    assert list(mapped) == [p for p in PACKAGES if p]
    assert mapped == _code_imports("hermes_state")


def test_the_map_names_every_cli_subpackage_in_order_with_what_it_imports() -> None:
    mapped = _map_imports("hermes_cli")
    assert list(mapped) == [p for p in CLI_PACKAGES if p]
    assert mapped == _code_imports("hermes_cli")


def test_the_module_table_lists_every_module_of_every_subpackage() -> None:
    table = {
        m.group(1): set(m.group(2).split(", "))
        for m in re.finditer(r"^\| `(\w+/\w+)` \| (.+) \|$", _architecture(), re.M)
    }
    code: dict[str, set[str]] = {}
    for root in ("hermes_state", "hermes_cli"):
        for name in module_paths(root):
            if "." in name and not name.endswith("__init__"):
                package, module = name.split(".")
                code.setdefault(f"{root}/{package}", set()).add(module)
    assert table == code
