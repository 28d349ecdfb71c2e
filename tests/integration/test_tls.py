"""TLS end to end, with a CA and a node certificate this test makes (openssl).

With TRACEDRAY_TLS_CERT/KEY/CA set, every server of the cluster speaks mutual TLS
(gRPC and the task stream) on top of the token: tasks, actor calls and objects
work, and a plaintext caller or one without a certificate gets nothing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from pathlib import Path

import grpc
import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2, gcs_pb2_grpc
from tracedray.core.address import Address
from tracedray.core.protocol import task_stream
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.worker.task_stream_server import TaskStreamServer

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
TOKEN = "tls-test-token-0123456789abcdef"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, and a certificate for 127.0.0.1 that it signed."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=tracedray test CA", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "node.pem", "-days", "2", "-extfile", "san.ext",
             cwd=folder)
    return {"cert": folder / "node.pem", "key": folder / "node.key", "ca": folder / "ca.pem"}


@pytest.fixture
def tls_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    files = make_certificates(tmp_path)
    monkeypatch.setenv("TRACEDRAY_TLS_CERT", str(files["cert"]))
    monkeypatch.setenv("TRACEDRAY_TLS_KEY", str(files["key"]))
    monkeypatch.setenv("TRACEDRAY_TLS_CA", str(files["ca"]))
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", TOKEN)
    return files


def test_a_cluster_with_tls_works_end_to_end_and_refuses_plaintext(
        tls_env: dict[str, Path], no_leaks: None) -> None:
    import numpy as np

    import tracedray

    info = tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    try:
        @tracedray.remote
        def square(x: int) -> int:
            return x * x

        @tracedray.remote
        class Counter:
            def __init__(self) -> None:
                self.n = 0

            def inc(self) -> int:
                self.n += 1
                return self.n

        assert tracedray.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
        counter = Counter.remote()
        assert tracedray.get([counter.inc.remote() for _ in range(50)])[-1] == 50
        big = tracedray.put(np.arange(1_000_000))
        assert int(tracedray.get(big).sum()) == 499999500000

        gcs = info["address"]
        request = gcs_pb2.GetNodesRequest()
        metadata = [("authorization", f"Bearer {TOKEN}")]
        plain = gcs_pb2_grpc.GcsServiceStub(grpc.insecure_channel(gcs))
        with pytest.raises(grpc.RpcError) as refused:
            plain.GetNodes(request, timeout=5, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # no TLS: no connection
        # TLS that trusts the CA but shows no client certificate: mutual TLS refuses it.
        anonymous = grpc.ssl_channel_credentials(root_certificates=tls_env["ca"].read_bytes())
        stub = gcs_pb2_grpc.GcsServiceStub(grpc.secure_channel(gcs, anonymous))
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetNodes(request, timeout=5, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # With the certificate and the token: answered.
        full = grpc.ssl_channel_credentials(
            root_certificates=tls_env["ca"].read_bytes(),
            private_key=tls_env["key"].read_bytes(),
            certificate_chain=tls_env["cert"].read_bytes())
        stub = gcs_pb2_grpc.GcsServiceStub(grpc.secure_channel(gcs, full))
        assert len(stub.GetNodes(request, timeout=5, metadata=metadata).nodes) == 1
    finally:
        tracedray.shutdown()


def test_the_task_stream_speaks_tls_and_drops_plaintext(tls_env: dict[str, Path]) -> None:
    def echo(spec: common_pb2.TaskSpec, reply: object) -> None:
        reply(common_pb2.TaskResult(task_id=spec.task_id))  # type: ignore[operator]

    server = TaskStreamServer("127.0.0.1", echo)
    try:
        # Plaintext, even with the right handshake: no TLS, closed unanswered.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:
            plain.sendall(task_stream.handshake_frame(TOKEN)
                          + task_stream.one_item_frame(common_pb2.TaskSpec(task_id=b"x")))
            try:
                data = plain.recv(100)
            except ConnectionResetError:  # closed with our bytes unread
                data = b""
            assert data == b"" or data[0] == 0x15  # the end, or a TLS alert: never a result
        # The real caller: TLS, handshake, 200 tasks, results in order, clean close.
        got: list[bytes] = []
        errors: list[BaseException | None] = []
        done = threading.Event()

        def on_results(_conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
            got.extend(r.task_id for r in results)
            if len(got) == 200:
                done.set()

        conn = WorkerConnection(Address("node", "127.0.0.1", 1, "w", 1, server.port),
                                on_results, lambda _c, e: (errors.append(e), done.set()))
        for i in range(200):
            conn.send(common_pb2.TaskSpec(task_id=i.to_bytes(4, "big")))
        assert done.wait(20) and got == [i.to_bytes(4, "big") for i in range(200)]
        assert task_stream.is_tls(conn._sock)  # type: ignore[arg-type]
        conn.close()
        conn._reader.join(10)
        assert not conn.broken, errors
        assert server.statistics().refused_total == 1
    finally:
        server.stop()
