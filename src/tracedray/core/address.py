"""Process addresses as plain immutable values, and their proto twins."""

from __future__ import annotations

from typing import NamedTuple

from tracedray._proto.v1 import common_pb2


class Address(NamedTuple):
    node_id: str
    ip: str
    port: int
    worker_id: str = ""
    pid: int = 0
    task_port: int = 0  # a worker's task stream (plain TCP); 0 for drivers, raylets, GCS

    @property
    def target(self) -> str:
        return f"{self.ip}:{self.port}"

    def to_proto(self) -> common_pb2.Address:
        return common_pb2.Address(node_id=self.node_id, ip=self.ip, port=self.port,
                                  worker_id=self.worker_id, pid=self.pid,
                                  task_port=self.task_port)

    @classmethod
    def from_proto(cls, msg: common_pb2.Address) -> Address:
        return cls(msg.node_id, msg.ip, msg.port, msg.worker_id, msg.pid, msg.task_port)


def parse_host_port(text: str) -> tuple[str, int]:
    """Parse ``host:port``; raises ValueError with the offending text."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected host:port, got {text!r}")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in {text!r}")
    return host, port
