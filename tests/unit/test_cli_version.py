"""`tracedray --version` prints the package's version and runs no command."""

from __future__ import annotations

from typer.testing import CliRunner

from tracedray._version import __version__
from tracedray.cli.app import app


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"tracedray {__version__}"
