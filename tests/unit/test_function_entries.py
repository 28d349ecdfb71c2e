"""Function-table entries carry the driver's import paths; SystemExit codes as Python's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tracedray.core import functions
from tracedray.core.worker.task_executor import exit_code


def test_entry_round_trip_and_bare_pickles() -> None:
    entry = functions.encode_entry(b"\x80\x05pickle\nwith newline", ["/a", "/b c"])
    assert functions.decode_entry(entry) == (b"\x80\x05pickle\nwith newline", ["/a", "/b c"])
    assert functions.decode_entry(b"\x80\x05bare") == (b"\x80\x05bare", [])


def test_import_paths_are_added_once_after_the_first_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["first", "second"])
    functions.add_import_paths([str(tmp_path), str(tmp_path), str(tmp_path / "missing")])
    assert sys.path == ["first", str(tmp_path), "second"]


def test_driver_import_paths_name_the_script_folder_and_working_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "job.py")])
    monkeypatch.chdir("/")
    assert functions.driver_import_paths() == [str(tmp_path), "/"]
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert functions.driver_import_paths() == ["/"]


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (7, 7), ("bye", 1)])
def test_exit_code_follows_python(code: object, status: int) -> None:
    assert exit_code(SystemExit(code)) == status
