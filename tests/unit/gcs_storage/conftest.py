from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tracedray.core.gcs.storage import GcsStorage, InMemoryStorage, SqliteStorage, open_storage
from tracedray.testing.redis_server import RedisServer

BACKENDS = ("memory", "sqlite", "redis")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the API suite; tests that kill Redis start their own."""
    with RedisServer(appendfsync="no") as server:
        yield server


def _make_storage(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> GcsStorage:
    if backend == "memory":
        return InMemoryStorage()
    if backend == "sqlite":
        return SqliteStorage(tmp_path / "gcs.sqlite3")
    server: RedisServer = request.getfixturevalue("redis_server")
    admin = redis.Redis.from_url(server.url)
    admin.flushdb()  # each test starts from empty tables
    admin.close()
    return open_storage(server.url, session_dir=tmp_path)


@pytest.fixture(params=BACKENDS)
def storage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[GcsStorage]:
    backend = _make_storage(request.param, tmp_path, request)
    yield backend
    backend.close()


@pytest.fixture
def make_storage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[str], GcsStorage]]:
    """Open a fresh storage of the named backend; closed after the test."""
    opened: list[GcsStorage] = []

    def make(backend: str) -> GcsStorage:
        opened.append(_make_storage(backend, tmp_path, request))
        return opened[-1]

    yield make
    for backend in opened:
        backend.close()


def _wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.005)


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """Wait for a condition another thread or process makes true (no fixed sleeps)."""
    return _wait_until
