"""The command line sits on top: no runtime package imports ``tracedray.cli``.

Read from the source (every import statement, inside functions and ``TYPE_CHECKING``
blocks too), since an import inside a function hides a cycle from import time.
"""

from __future__ import annotations

import ast
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
