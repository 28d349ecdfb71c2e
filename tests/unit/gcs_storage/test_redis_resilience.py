"""Redis dying under the GCS storage: nothing acknowledged is lost, writes wait it out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tracedray.core.gcs.storage import TieredTable, open_storage
from tracedray.core.gcs.storage.redis_backend import RedisStorage, next_backoff
from tracedray.core.gcs.storage.url import parse_storage_url
from tracedray.exceptions import RaySystemError
from tracedray.testing.redis_server import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as own:  # appendfsync always: a SIGKILL loses nothing acknowledged
        yield own


def test_sigkill_and_restart_keep_every_acknowledged_write(
    server: RedisServer, tmp_path: Path
) -> None:
    storage = open_storage(server.url, session_dir=tmp_path)
    table = TieredTable("actors", storage, write_through=True)
    for i in range(500):
        table.put(f"actor:{i}", f"state{i}".encode(), finished=False)
    storage.put_many("tasks", {f"task:{i}": b"FINISHED" for i in range(3000)})
    storage.close()
    server.kill()
    assert not server.running
    server.restart()
    recovered = open_storage(server.url, session_dir=tmp_path)
    assert recovered.count("actors") == 500 and recovered.count("tasks") == 3000
    assert recovered.get("actors", "actor:499") == b"state499"
    expected = sorted(f"task:{i}" for i in range(3000) if str(i).startswith("299"))
    assert [k for k, _ in recovered.scan("tasks", prefix="task:299")] == expected
    recovered.close()


def test_a_put_while_redis_is_down_waits_and_lands_after_restart(
    server: RedisServer, tmp_path: Path, wait_until: Callable[..., None]
) -> None:
    storage = RedisStorage(parse_storage_url(server.url), retry_timeout_s=60, backoff_max_s=0.1)
    storage.put("jobs", "before", b"1")
    server.kill()
    returned = threading.Event()
    errors: list[BaseException] = []

    def put() -> None:
        try:
            storage.put("jobs", "during", b"2")
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)
        returned.set()

    writer = threading.Thread(target=put)
    writer.start()
    wait_until(lambda: storage.statistics().retries >= 3)
    assert not returned.is_set()  # not acknowledged while Redis is down
    server.restart()
    writer.join(timeout=30)
    assert returned.is_set() and not errors
    assert storage.get("jobs", "during") == b"2" and storage.get("jobs", "before") == b"1"
    stats = storage.statistics()
    assert stats.connection_losses == 1
    storage.close()


def test_redis_gone_for_longer_than_the_retry_budget_is_a_system_error(
    server: RedisServer,
) -> None:
    storage = RedisStorage(parse_storage_url(server.url), retry_timeout_s=0.3, backoff_max_s=0.05)
    server.kill()
    with pytest.raises(RaySystemError) as caught:
        storage.get("nodes", "n1")
    assert server.url in str(caught.value) and "unreachable" in str(caught.value)
    assert storage.statistics().retries >= 1
    storage.close()


def test_backoff_doubles_up_to_the_cap() -> None:
    delays = [0.05]
    for _ in range(8):
        delays.append(next_backoff(delays[-1], 2.0))
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(delays) == 2.0 and delays[-1] == 2.0


def test_redis_server_restart_keeps_port_and_cleans_up() -> None:
    with RedisServer(appendfsync="no") as redis_server:
        url, pid = redis_server.url, redis_server.pid
        data_dir = redis_server.data_dir
        redis_server.restart()
        assert redis_server.url == url and redis_server.pid != pid and redis_server.running
    assert not redis_server.running and not data_dir.exists()
