from __future__ import annotations

from pathlib import Path

import pytest

from tracedray.core.gcs.storage import is_write_through, open_storage, parse_storage_url
from tracedray.exceptions import ClusterConnectionError, ConfigError
from tracedray.testing.redis_server import RedisServer, free_port


def test_memory_opens_the_sqlite_cold_tier_in_the_session_dir(tmp_path: Path) -> None:
    storage = open_storage("memory", session_dir=tmp_path / "session")
    storage.put("tasks", "t", b"done")
    storage.close()
    assert (tmp_path / "session" / "gcs.sqlite3").is_file()
    assert not is_write_through(storage)
    reopened = open_storage("memory", session_dir=tmp_path / "session")
    assert reopened.get("tasks", "t") == b"done"
    assert "memory" in reopened.description
    reopened.close()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "empty"),
        ("localhost:6379", "did you mean 'redis://localhost:6379'"),
        ("http://127.0.0.1:6379", "unknown scheme 'http'"),
        ("redis://", "no host"),
        ("redis://127.0.0.1:99999/0", "bad port"),
        ("redis://127.0.0.1:port/0", "bad port"),
        ("redis://127.0.0.1:6379/zero", "database number"),
        ("redis://127.0.0.1:6379/0?db=x", "database number"),
        ("unix://", "socket path"),
        ("sqlite:///tmp/x", "unknown scheme 'sqlite'"),
    ],
)
def test_malformed_urls_are_config_errors_naming_the_url(
    url: str, reason: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        open_storage(url, session_dir=tmp_path)
    message = str(caught.value)
    assert repr(url) in message
    assert reason in message
    assert "redis://" in message and "'memory'" in message  # the accepted forms


def test_passwords_never_reach_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_storage_url("redis://:hunter2@127.0.0.1:6379/abc")
    assert "hunter2" not in str(caught.value)
    spec = parse_storage_url("redis://user:hunter2@127.0.0.1:6379/1")
    assert spec.display == "redis://user:***@127.0.0.1:6379/1"
    assert spec.url.endswith("hunter2@127.0.0.1:6379/1")


def test_accepted_forms_parse() -> None:
    assert parse_storage_url(" memory ").kind == "memory"
    for url in ("redis://h", "redis://h:1/2", "rediss://h:6380/0", "unix:///run/r.sock?db=3"):
        assert parse_storage_url(url).kind == "redis"


def test_unreachable_redis_is_a_cluster_connection_error(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.raises(ClusterConnectionError) as caught:
        open_storage(url, session_dir=tmp_path)
    assert url in str(caught.value)
    assert "redis-server running" in str(caught.value)


@pytest.mark.redis
def test_redis_url_opens_a_write_through_storage(tmp_path: Path) -> None:
    with RedisServer(appendfsync="no") as server:
        storage = open_storage(server.url, session_dir=tmp_path)
        assert is_write_through(storage)
        assert storage.description == server.url
        storage.close()
    assert not list(tmp_path.iterdir())  # Redis mode writes nothing to the session dir
