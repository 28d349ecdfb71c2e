"""An authenticated, private cluster by default, against `tracedray start --head`.

A caller without the cluster's token gets UNAUTHENTICATED from the GCS and the
raylet and nothing else; a task stream that skips its handshake is closed unread; a
driver with a wrong token gets AuthenticationError within seconds; a driver of the
same user connects with nothing to configure; the session's files and the objects
in /dev/shm are owner-only; the token never shows in logs, traces or CLI output.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cli_support import isolated_root, run, start_head
from multinode_support import log_events, wait_for

from tracedray._proto.v1 import common_pb2, gcs_pb2, gcs_pb2_grpc, raylet_pb2, raylet_pb2_grpc
from tracedray.core.protocol import task_stream
from tracedray.exceptions import AuthenticationError

WRONG = "not-the-cluster-token-0123456789"


@pytest.fixture
def head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """(GCS address, session folder) of a head started with defaults."""
    for name in ("TRACEDRAY_AUTH_TOKEN", "TRACEDRAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    with isolated_root(tmp_path):
        address = start_head()
        (session,) = tmp_path.glob("session_2*")
        yield address, session


def _raylet_address(gcs: str) -> str:
    from tracedray.core.gcs.client import GcsClient

    (node,) = GcsClient(gcs).get_nodes()  # this test process finds the token like a CLI
    return f"{node.info.raylet.ip}:{node.info.raylet.port}"


def _refused(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        result = call()  # type: ignore[operator]
        list(result) if hasattr(result, "__iter__") else None  # a streaming reply
    return info.value.code()  # type: ignore[no-any-return]


def test_raw_grpc_without_the_token_is_refused_and_does_nothing(
        head: tuple[str, Path]) -> None:
    gcs, session = head
    raylet = _raylet_address(gcs)
    gcs_stub = gcs_pb2_grpc.GcsServiceStub(grpc.insecure_channel(gcs))
    raylet_stub = raylet_pb2_grpc.RayletServiceStub(grpc.insecure_channel(raylet))
    wrong = [("authorization", f"Bearer {WRONG}")]
    for metadata in (None, wrong):
        assert _refused(lambda m=metadata: gcs_stub.GetNodes(
            gcs_pb2.GetNodesRequest(), timeout=5, metadata=m)) == grpc.StatusCode.UNAUTHENTICATED
        assert _refused(lambda m=metadata: raylet_stub.ReadSessionFiles(
            raylet_pb2.ReadSessionFilesRequest(subdir="logs"), timeout=5,
            metadata=m)) == grpc.StatusCode.UNAUTHENTICATED
        assert _refused(lambda m=metadata: raylet_stub.ShutdownNode(
            raylet_pb2.ShutdownNodeRequest(), timeout=5,
            metadata=m)) == grpc.StatusCode.UNAUTHENTICATED
    # No side effect: the node the refused ShutdownNode named is still up.
    time.sleep(0.5)
    assert run("status", "--address", gcs).exit_code == 0
    assert _raylet_address(gcs) == raylet
    refused = wait_for(lambda: [e for e in log_events(session, "auth.refused")
                                if e.get("method", "").endswith("ShutdownNode")], 15,
                       "auth.refused lines for ShutdownNode")
    assert all(e["peer"] for e in refused)
    assert not any(WRONG in str(e) for e in log_events(session, "auth.refused"))


def test_same_user_driver_connects_and_a_rogue_task_stream_runs_nothing(
        head: tuple[str, Path]) -> None:
    import tracedray

    gcs, session = head
    tracedray.init(address=gcs)  # nothing to configure: the session's token file
    try:
        @tracedray.remote
        class Counter:
            def __init__(self) -> None:
                self.n = 0

            def inc(self) -> int:
                self.n += 1
                return self.n

            def task_port(self) -> int:
                from tracedray.api import runtime

                worker = runtime.current()
                assert worker is not None
                return int(worker.address.task_port)

        counter = Counter.remote()
        assert tracedray.get(counter.inc.remote()) == 1
        port = tracedray.get(counter.task_port.remote())
        # A task stream that skips the handshake: closed, nothing read or run.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as rogue:
            spec = common_pb2.TaskSpec(task_id=b"\x01" * 24, function_name="inc")
            rogue.sendall(task_stream.one_item_frame(spec))
            assert rogue.recv(100) == b""
        assert tracedray.get(counter.inc.remote()) == 2  # the rogue frame ran nothing
        wait_for(lambda: [e for e in log_events(session, "auth.refused")
                          if e.get("method") == "task_stream"], 15, "a task stream refusal")
    finally:
        tracedray.shutdown()


def test_session_files_and_shared_memory_objects_are_owner_only(
        head: tuple[str, Path]) -> None:
    import numpy as np

    import tracedray

    gcs, session = head
    tracedray.init(address=gcs)
    try:
        @tracedray.remote
        def make() -> object:
            print("a line for the logs")
            return np.ones(1_000_000, dtype=np.uint8)

        ref = tracedray.put(np.zeros(2_000_000, dtype=np.uint8))  # in /dev/shm
        made = make.remote()
        assert tracedray.get(ref).nbytes == 2_000_000 and tracedray.get(made).nbytes == 1_000_000
        prefix = f"tracedray-{session.name[-24:]}-"
        shm = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
        assert len(shm) >= 2
        for name in shm:
            assert stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode) == 0o600, name
        _assert_owner_only(session)
    finally:
        tracedray.shutdown()
    _assert_owner_only(session)


def _assert_owner_only(session: Path) -> None:
    assert stat.S_IMODE(session.stat().st_mode) == 0o700
    loose = []
    for path in [session, *session.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            loose.append(f"{path.relative_to(session)} {oct(mode)}")
    assert not loose, f"readable by others: {loose}"


def test_a_driver_with_a_wrong_token_fails_fast_and_clearly(
        head: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import tracedray

    gcs, _ = head
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        tracedray.init(address=gcs, _auth_token=WRONG)
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert gcs in message and "get-auth-token" in message and WRONG not in message
    assert not tracedray.is_initialized()
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", WRONG)
    with pytest.raises(AuthenticationError, match="TRACEDRAY_AUTH_TOKEN"):
        tracedray.init(address=gcs)
    monkeypatch.delenv("TRACEDRAY_AUTH_TOKEN")
    tracedray.init(address=gcs)  # a failed attempt leaves nothing behind
    tracedray.shutdown()


def test_nodes_join_with_the_token_and_not_without(head: tuple[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    gcs, session = head
    token = run("get-auth-token").stdout.strip()
    assert token == (session / "auth_token").read_text()
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", WRONG)
    started = time.monotonic()
    refused = run("start", "--address", gcs, "--num-cpus", "1", code=1)
    assert time.monotonic() - started < 10
    assert "refused" in refused.stderr and "get-auth-token" in refused.stderr
    assert WRONG not in refused.stderr
    joined = run("start", "--address", gcs, "--num-cpus", "1", "--token", token,
                 "--object-store-memory", str(100 << 20))
    assert token not in joined.stdout + joined.stderr
    monkeypatch.delenv("TRACEDRAY_AUTH_TOKEN")
    status = run("status", "--address", gcs)
    assert status.stdout.count("ALIVE") == 2 and token not in status.stdout


def test_the_token_and_argument_values_stay_out_of_the_record(
        head: tuple[str, Path]) -> None:
    import tracedray

    gcs, session = head
    token = (session / "auth_token").read_text()
    secret_argument = "argument-value-7f3a9c1e"
    tracedray.init(address=gcs)
    try:
        @tracedray.remote
        def echo(text: str) -> int:
            return len(text)

        assert tracedray.get(echo.remote(secret_argument)) == len(secret_argument)
    finally:
        tracedray.shutdown()
    from tracedray.telemetry.spool_convert import sync_traces_dir

    sync_traces_dir(session / "traces")
    wait_for(lambda: log_events(session, "process.start"), 10, "process.start lines")
    for path in [*session.glob("logs/*"), *session.glob("traces/*")]:
        data = path.read_bytes()
        assert token.encode() not in data, path
        assert secret_argument.encode() not in data, path


def _store_entries(shm: Path, names: list[str]) -> list[Path]:
    """The store's files and pool folders under /dev/shm, with what the folders hold."""
    entries = [shm / name for name in names]
    return entries + [inner for entry in entries if entry.is_dir() for inner in entry.iterdir()]


def test_joined_nodes_get_the_token_and_pulled_copies_are_owner_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leaks: None) -> None:
    import numpy as np
    from multinode_support import started_nodes

    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path))
    for name in ("TRACEDRAY_AUTH_TOKEN", "TRACEDRAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    with started_nodes(monkeypatch, {"num_cpus": 1, "resources": {"head": 1}},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}}) as cluster:
        ray = cluster.ray
        ray.init(address=cluster.address)
        try:
            @ray.remote(resources={"b": 1})
            def make() -> object:
                return np.ones(3_000_000, dtype=np.uint8)

            assert int(ray.get(make.remote()).sum()) == 3_000_000  # pulled to the head
            prefix = f"tracedray-{cluster.session_dir.name[-24:]}-"
            shm = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
            assert len(shm) >= 2  # b's copy and the head's
            for path in _store_entries(Path("/dev/shm"), shm):
                # Files are owner-only; a pool's folder is owner-only too, and
                # may or may not exist yet depending on what the store reused.
                mode = stat.S_IMODE(path.stat().st_mode)
                assert mode == (0o700 if path.is_dir() else 0o600), path
        finally:
            ray.shutdown()


def test_a_driver_without_a_token_follows_a_cluster_that_checks_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracedray

    monkeypatch.delenv("TRACEDRAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "disabled")
    with isolated_root(tmp_path):
        gcs = start_head()
        (session,) = tmp_path.glob("session_2*")
        assert not (session / "auth_token").exists()
        monkeypatch.delenv("TRACEDRAY_AUTH_MODE")  # this driver: the default mode
        tracedray.init(address=gcs)
        try:
            @tracedray.remote
            def total(values: object) -> int:
                print("summing")  # the worker calls the driver to show this
                return int(sum(values))  # type: ignore[call-overload]

            ref = tracedray.put(list(range(100_000)))  # owned by the driver
            assert tracedray.get(total.remote(ref)) == sum(range(100_000))
            time.sleep(1.0)  # the printed line travels to the driver meanwhile
        finally:
            tracedray.shutdown()
        assert log_events(session, "auth.refused") == []


def test_cli_token_options_and_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRACEDRAY_AUTH_TOKEN", "TRACEDRAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    with isolated_root(tmp_path):
        missing = run("get-auth-token", "--address", "127.0.0.1:9", code=1)
        assert "no auth token" in missing.stderr and "head's machine" in missing.stderr
        short = run("start", "--head", "--token", "tooshort", code=1)
        assert "at least 16" in short.stderr and "tooshort" not in short.stderr
        given = "a-token-chosen-by-the-user-0123456789"
        started = run("start", "--head", "--port", "0", "--num-cpus", "1",
                      "--object-store-memory", str(100 << 20), "--token", given)
        assert given not in started.stdout + started.stderr
        assert run("get-auth-token").stdout.strip() == given
        assert (tmp_path / "auth_token").read_text() == given  # the per-user file
        assert stat.S_IMODE((tmp_path / "auth_token").stat().st_mode) == 0o600


def test_a_cluster_process_without_a_token_does_not_start(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEDRAY_AUTH")}
    done = subprocess.run([sys.executable, "-m", "tracedray.core.gcs.main", "--session-dir",
                           str(tmp_path), "--ready-file", str(tmp_path / "ready")],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads((tmp_path / "ready").read_text())
    assert report["error_type"] == "ConfigError"
    assert "TRACEDRAY_AUTH_TOKEN is not set" in report["error"]


def test_a_token_this_process_kept_for_its_cluster_goes_when_the_cluster_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """The processes a driver or a test starts are called with their token, which wins
    over the environment's; once they are stopped, their addresses may be another
    cluster's (a reused port), whose token the environment gives."""
    import os

    from tracedray.core import auth, node, session

    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", WRONG)
    kept = auth.AuthSettings(True, "the-first-clusters-token-0123456789", "test")
    processes = node.start_head(session.create_session(), num_cpus=1,
                                object_store_memory=64 << 20, parent_pid=os.getpid(),
                                auth_settings=kept)
    try:
        for address in (processes.gcs_address, processes.raylet_address):
            assert auth.client_token(address).token == kept.token
    finally:
        processes.stop()
    for address in (processes.gcs_address, processes.raylet_address):
        assert auth.client_token(address).token == WRONG  # the environment's, now
