"""Tabular output shared by the CLI commands: Rich tables that fit the terminal, or JSON.

Data goes to stdout; notes, warnings and errors go to stderr, so
``--format json`` output can always be piped into ``jq``. A limit that drops rows
is said out loud (stderr) in both formats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from typing import Any

import typer


class OutputFormat(str, Enum):
    """One vocabulary for every command's ``--format`` (Ray's: default, table, json, yaml)."""

    default = "default"  # the command's form for people (a table, a story, log lines)
    table = "table"  # the same as default: every human form is a table or text
    json = "json"
    yaml = "yaml"

    @property
    def structured(self) -> bool:
        """Data for a program (json or yaml): nothing but the data on stdout."""
        return self in (OutputFormat.json, OutputFormat.yaml)


# Spellings older tracedray commands took: accepted, with a note on stderr.
DEPRECATED_FORMATS = {"text": OutputFormat.default, "pretty": OutputFormat.default}
FORMAT_HELP = "default (or table) for people; json or yaml for scripts."


def parse_format(value: str | OutputFormat) -> OutputFormat:
    """``--format``'s value; a deprecated spelling is noted on stderr."""
    if isinstance(value, OutputFormat):
        return value
    text = value.strip().lower()
    if text in DEPRECATED_FORMATS:
        note(f"--format {text} is deprecated: it is --format default now")
        return DEPRECATED_FORMATS[text]
    try:
        return OutputFormat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r}: choose default, table, json or yaml") from None


def format_option(help_text: str = FORMAT_HELP) -> Any:
    """The ``--format`` option of every command."""
    return typer.Option("default", "--format", parser=parse_format,
                        metavar="[default|table|json|yaml]", help=help_text)
ADDRESS_HELP = "GCS address (host:port) of the cluster; default: the newest session."
SESSION_HELP = ("A session folder to answer about (default: the address's, or session_latest); "
                "a cluster that no longer runs is answered from its files.")


def format_time(seconds: float | None) -> str:
    if not seconds:
        return ""
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def format_bytes(count: int | float, unit: str = "auto") -> str:
    """``unit`` is B, KB, MB, GB (powers of 1024, as Ray's --units) or auto."""
    if count is None or count < 0:
        return "?"
    factors = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
    if unit == "auto":
        unit = next((u for u in ("GB", "MB", "KB") if count >= factors[u]), "B")
    if unit == "B":
        return f"{int(count)} B"
    return f"{count / factors[unit]:.2f} {unit}"


def format_cell(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key.endswith("_time") and isinstance(value, int | float):
        return format_time(float(value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if math.isfinite(value) and value.is_integer() else f"{value:.3g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {format_cell('', v)}" for k, v in sorted(value.items()))
    if isinstance(value, list | tuple):
        return ", ".join(format_cell("", v) for v in value)
    return str(value)


def stdout_console() -> Any:
    from rich.console import Console

    return Console(soft_wrap=False)


def stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def note(message: str) -> None:
    from rich.markup import escape

    stderr_console().print(f"[dim]{escape(message)}[/]")


def warn(message: str) -> None:
    from rich.markup import escape

    stderr_console().print(f"[yellow]warning:[/] {escape(message)}")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error to stderr; ``raise fail(...)`` ends the command with ``code``."""
    from rich.markup import escape

    stderr_console().print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code=code)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def print_data(data: Any, fmt: OutputFormat, *, compact: bool = False) -> None:
    """``data`` as JSON or YAML (the same document: what JSON would hold, as YAML).
    ``compact``: JSON on one line (large data: the C encoder, ten times faster)."""
    if fmt is OutputFormat.yaml:
        import yaml

        plain = json.loads(json.dumps(data, default=str))  # the JSON form's types
        typer.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip("\n"))
    elif compact:
        typer.echo(json.dumps(data, default=str))
    else:
        print_json(data)


SHORT_ID = 12  # the fewest characters of an id a table shows (as `status` shows nodes)
_HEX = frozenset("0123456789abcdef")


def is_id_column(column: str) -> bool:
    return column.endswith("_id") or column in ("object_ref", "trace_id")


def short_ids(values: Iterable[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each hex id of ``values`` to its shortest prefix of at least ``minimum`` characters
    that no other id of ``values`` shares: a table's ids fit a line and can be pasted
    into `trace`, `logs --task` or `get`, which take a unique prefix."""
    ids = sorted({v for v in values if len(v) > minimum and set(v) <= _HEX})
    short: dict[str, str] = {}
    for number, value in enumerate(ids):
        # Sorted: only the neighbours can share the longest prefix.
        shared = max((_common(value, ids[other]) for other in (number - 1, number + 1)
                      if 0 <= other < len(ids)), default=0)
        short[value] = value[:max(minimum, shared + 1)]
    return short


def _common(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def build_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, title: str = "",
                formatters: Mapping[str, Any] | None = None) -> Any:
    from rich.table import Table

    table = Table(title=title or None, title_justify="left", expand=False, show_lines=False)
    # Ids show as unique prefixes that never wrap (the whole id: --format json); call
    # sites and other text wrap instead of being cut with an ellipsis.
    shortened = {c: short_ids(str(row.get(c) or "") for row in rows)
                 for c in columns if is_id_column(c)}
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in shortened)
    formatters = formatters or {}
    for row in rows:
        table.add_row(*[formatters[c](row.get(c)) if c in formatters
                        else shortened[c].get(str(row.get(c)), format_cell(c, row.get(c)))
                        if c in shortened else format_cell(c, row.get(c)) for c in columns])
    return table


def print_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fmt: OutputFormat, *,
               title: str = "", total: int | None = None, what: str = "rows",
               formatters: Mapping[str, Any] | None = None) -> None:
    """Rows as a table or JSON list, then (stderr) how many were left out by a limit."""
    if fmt.structured:
        print_data([dict(row) for row in rows], fmt)
    elif rows:
        stdout_console().print(build_table(rows, columns, title=title, formatters=formatters))
    else:
        note(f"no {what}")
    report_left_out(len(rows), total, what)


def report_left_out(shown: int, total: int | None, what: str, option: str = "--limit") -> None:
    if total is not None and total > shown:
        note(f"showing {shown} of {total} {what}; {total - shown} left out "
             f"(raise {option} to see more)")


def columns_for(rows: Iterable[Mapping[str, Any]], preferred: Sequence[str]) -> list[str]:
    """The preferred columns, then any extra keys rows carry (e.g. ``events`` with --detail)."""
    extra: list[str] = []
    for row in rows:
        for key in row:
            if key not in preferred and key not in extra:
                extra.append(key)
    return [*preferred, *extra]
