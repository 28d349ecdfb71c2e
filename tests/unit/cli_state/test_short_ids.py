"""Ids in tables: the shortest unique prefix (at least 12 characters), never wrapped."""

from __future__ import annotations

from rich.console import Console

from tracedray.cli.output import build_table, short_ids

A = "aaaabbbbccccdddd" + "0" * 16
B = "aaaabbbbccccdddd" + "1" + "0" * 15
C = "ffff" * 8


def test_prefixes_are_unique_and_no_shorter_than_twelve() -> None:
    short = short_ids([A, B, C, C, "", "node-1", "1234"])
    assert short == {A: A[:17], B: B[:17], C: C[:12]}
    assert short_ids([A], minimum=4) == {A: A[:4]}


def test_a_table_shows_prefixes_on_one_line() -> None:
    rows = [{"task_id": A, "name": "f"}, {"task_id": B, "name": "g"}, {"task_id": C, "name": "h"}]
    console = Console(width=40, record=True)
    console.print(build_table(rows, ["task_id", "name"]))
    text = console.export_text()
    assert A[:17] in text and C[:12] in text and A not in text
    assert all(len(line) <= 40 for line in text.splitlines())
