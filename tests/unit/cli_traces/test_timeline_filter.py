"""--since/--until accept ISO 8601 (UTC unless it says) and spans back from now."""

from __future__ import annotations

import pytest

from tracedray.cli.tracestore.timeline_filter import parse_moment
from tracedray.exceptions import ConfigError

NOW = 1_800_000_000 * 10**9


def test_relative_and_absolute_moments() -> None:
    assert parse_moment("-10m", NOW) == NOW - 600 * 10**9
    assert parse_moment("-1.5s", NOW) == NOW - 1_500_000_000
    assert parse_moment("1970-01-01T00:00:01", NOW) == 10**9
    assert parse_moment("1970-01-01T01:00:01+01:00", NOW) == 10**9
    assert parse_moment("1970-01-01T00:00:01Z", NOW) == 10**9


def test_a_bad_moment_says_what_to_give() -> None:
    with pytest.raises(ConfigError, match="ISO 8601"):
        parse_moment("yesterday", NOW, "--until")
