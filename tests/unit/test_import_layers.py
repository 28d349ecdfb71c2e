"""The house's layout: packages import each other without cycles, the command line sits
on top (no runtime package imports ``tracedray.cli``), and modules and classes stay small
enough to read (at most 700 and 400 lines).

Read from the source (every import statement, inside functions and ``TYPE_CHECKING``
blocks too), since an import inside a function hides a cycle from import time.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import tracedray

PACKAGE = Path(tracedray.__file__).parent
# Everything a program or a cluster process runs; the CLI may import them, never the reverse.
BELOW_THE_CLI = ("core", "util", "telemetry", "logs", "metrics", "testing")


def imported_modules(source: str, path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in the file, relative ones made absolute."""
    package = ".".join(("tracedray", *path.relative_to(PACKAGE).parent.parts))
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[:len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.append((node.lineno, base))
            # ``from tracedray import cli`` names the package in the alias.
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def imports_of_cli(source: str, path: Path) -> list[str]:
    return [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
            for line, module in imported_modules(source, path)
            if module == "tracedray.cli" or module.startswith("tracedray.cli.")]


@pytest.mark.parametrize("package", BELOW_THE_CLI)
def test_runtime_packages_never_import_the_cli(package: str) -> None:
    offending = [hit for path in sorted((PACKAGE / package).rglob("*.py"))
                 for hit in imports_of_cli(path.read_text(), path)]
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize("statement", [
    "def f():\n    from tracedray.cli.cluster_client import connect\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tracedray.cli.output\n",
    "from tracedray import cli\n",
    "from ..cli import postmortem\n",
])
def test_the_check_sees_every_form_of_import(statement: str) -> None:
    assert imports_of_cli(statement, PACKAGE / "util" / "state.py")


def test_telemetry_never_imports_the_logs_package() -> None:
    """Logs sit on telemetry (trace ids, append files); telemetry reports its own
    warnings through ``telemetry.diagnostics``, which the logs package feeds."""
    offending = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
                 for path in sorted((PACKAGE / "telemetry").rglob("*.py"))
                 for line, module in imported_modules(path.read_text(), path)
                 if module == "tracedray.logs" or module.startswith("tracedray.logs.")]
    assert not offending, "\n".join(offending)


# Package edges that still point up a layer (``importer -> imported``). The list only
# shrinks: a test fails when one of them is gone, so whoever removes one removes it here.
KNOWN_BACK_EDGES: dict[tuple[str, str], str] = {}


def package_of(module: str, modules: Mapping[str, Path]) -> str:
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def all_modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("tracedray", *path.relative_to(PACKAGE).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def package_edges(modules: Mapping[str, Path]) -> dict[tuple[str, str], list[str]]:
    """``(importer, imported) -> ["file:line imports module", ...]`` between packages (a
    package is a folder). A subpackage importing a module of a package above it (``core/
    raylet`` using ``core/rpc.py``, anything using ``tracedray.config``) is not an edge:
    parent packages hold the plumbing their subpackages build on."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in sorted(modules.items()):
        importer = package_of(module, modules)
        for line, name in imported_modules(path.read_text(), path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if not name:
                continue
            imported = package_of(name, modules)
            if imported == importer or importer.startswith(imported + "."):
                continue
            edges.setdefault((importer, imported), []).append(
                f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    return edges


def cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one package (Tarjan)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_packages_import_each_other_without_cycles() -> None:
    edges = package_edges(all_modules())
    remaining = {edge: where for edge, where in edges.items() if edge not in KNOWN_BACK_EDGES}
    report = []
    for component in cycles(remaining):
        report.append("cycle between " + ", ".join(component) + ":")
        report.extend(f"  {a} -> {b}: {where[0]}" + (f" (+{len(where) - 1} more)"
                                                      if len(where) > 1 else "")
                      for (a, b), where in sorted(remaining.items())
                      if a in component and b in component)
    assert not report, "\n".join(report)


def test_every_known_back_edge_still_exists() -> None:
    edges = package_edges(all_modules())
    gone = [f"{a} -> {b}" for a, b in KNOWN_BACK_EDGES if (a, b) not in edges]
    assert not gone, ("no longer imported, remove from KNOWN_BACK_EDGES: " + ", ".join(gone))


def test_the_cycle_check_finds_a_cycle_through_three_packages() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("e", "d")]
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles(edges[1:]) == []


MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 400
# Modules and classes still over the limits; the lists only shrink, as KNOWN_BACK_EDGES.
KNOWN_LARGE_MODULES: set[str] = set()
KNOWN_LARGE_CLASSES: set[str] = set()


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module and per class, of every module but the generated ``_proto``."""
    modules, classes = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE.parent))
        if name.startswith("tracedray/_proto/"):
            continue
        source = path.read_text()
        modules[name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source, name)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                classes[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, classes


def test_modules_and_classes_stay_small() -> None:
    modules, classes = sizes()
    large = [f"{name}: {lines} lines (at most {MAX_MODULE_LINES})"
             for name, lines in modules.items()
             if lines > MAX_MODULE_LINES and name not in KNOWN_LARGE_MODULES]
    large += [f"{name}: {lines} lines (at most {MAX_CLASS_LINES})"
              for name, lines in classes.items()
              if lines > MAX_CLASS_LINES and name not in KNOWN_LARGE_CLASSES]
    assert not large, "split by concern:\n" + "\n".join(large)


def test_every_known_large_module_and_class_is_still_large() -> None:
    modules, classes = sizes()
    small = [name for name in KNOWN_LARGE_MODULES if modules.get(name, 0) <= MAX_MODULE_LINES]
    small += [name for name in KNOWN_LARGE_CLASSES if classes.get(name, 0) <= MAX_CLASS_LINES]
    assert not small, "within the limits now, remove from the KNOWN_LARGE lists: " + ", ".join(
        sorted(small))
