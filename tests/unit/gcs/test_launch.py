"""GcsLaunchSpec: what a restart needs to start the same GCS again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracedray.core.gcs.launch import GcsLaunchSpec
from tracedray.core.gcs.storage import FlushPolicy
from tracedray.exceptions import ConfigError


def test_json_round_trip_keeps_every_field() -> None:
    spec = GcsLaunchSpec(Path("/tmp/s"), "10.0.0.1", 6380, "redis://h:1/2", False,
                         FlushPolicy(interval_s=0.5, max_hot_entries=7, min_age_s=0.0))
    assert GcsLaunchSpec.from_json(spec.to_json()) == spec


def test_argv_carries_port_storage_and_policy() -> None:
    spec = GcsLaunchSpec(Path("/tmp/s"), "127.0.0.1", 0, "memory").with_port(4242)
    argv = spec.argv(parent_pid=99)
    pairs = dict(zip(argv[::2], argv[1::2], strict=False))
    assert pairs["--port"] == "4242" and pairs["--storage"] == "memory"
    assert pairs["--parent-pid"] == "99" and pairs["--ready-file"] == "/tmp/s/gcs.ready"
    assert float(pairs["--flush-interval"]) == FlushPolicy().interval_s
    assert "--no-flush" not in argv
    assert GcsLaunchSpec(Path("/x"), "h", 1, "memory", flushing=False).argv(
        parent_pid=0)[-1] == "--no-flush"


@pytest.mark.parametrize("text", ["", "{}", '{"session_dir": "/x"}', "[1]",
                                  '{"session_dir": "/x", "host": "h", "port": 1, "storage": "m",'
                                  ' "flushing": true, "flush_policy": {"interval_s": -1}}'])
def test_malformed_spec_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        GcsLaunchSpec.from_json(text)
