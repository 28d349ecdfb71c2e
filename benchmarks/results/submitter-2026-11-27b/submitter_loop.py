"""CPU per task through ``TaskSubmitter`` in process: ``submit_many([task])`` then its
result, with a fake raylet that grants one lease (later requests wait for good) and
fake task streams. Choose the side with ``PYTHONPATH``; prints the median and the least
µs per task of 7 runs (``N`` tasks each, default 20,000)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.worker import task_submitter as ts
from tracedray.core.worker.pending_task import PendingTask

CONNS: list[Conn] = []


class Conn:
    def __init__(self, address: Address, on_results: Any, on_broken: Any) -> None:
        self.address = address
        self.broken = False
        CONNS.append(self)

    def send(self, spec: Any) -> None:
        pass

    def send_many(self, specs: Any) -> None:
        pass

    def close(self) -> None:
        pass


class Call:
    def __init__(self, reply: raylet_pb2.LeaseReply | None) -> None:
        self.reply = reply

    def result(self) -> raylet_pb2.LeaseReply | None:
        if self.reply is None:
            threading.Event().wait()
        return self.reply

    def cancel(self) -> None:
        pass


class Raylet:
    address = "r"
    asked = 0

    def start_lease_request(self, request: Any) -> Call:
        Raylet.asked += 1
        if Raylet.asked > 1:
            return Call(None)
        worker = Address("n", "127.0.0.1", 2, "w", 99, 5).to_proto()
        return Call(raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.GRANTED,
                                          lease_id="L", worker=worker))

    def withdraw_lease_requests(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def return_worker(self, *args: Any, **kwargs: Any) -> None:
        pass


class Worker:
    worker_id = "d"

    def __init__(self) -> None:
        self.raylet = Raylet()
        self.address = Address("n", "127.0.0.1", 3, "d", os.getpid())
        self.pool = ThreadPoolExecutor(4)
        self.task_events = self.resolver = self

    def background(self, fn: Any, *args: Any) -> bool:
        self.pool.submit(fn, *args)
        return True

    def raylet_for_node(self, node_id: str) -> Raylet:
        return self.raylet

    def finish_task(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def resolve(self, task: PendingTask, ready: Any, failed: Any) -> None:
        ready(task)

    def cancel_on_worker(self, *args: Any, **kwargs: Any) -> None:
        pass


def task(i: int) -> PendingTask:
    spec = common_pb2.TaskSpec(task_id=i.to_bytes(8, "big"), job_id=b"\x01",
                               resources={"CPU": 1.0})
    return PendingTask(spec, [spec.task_id + b"r"], [], [], retries_left=0)


def main() -> None:
    ts.WorkerConnection = Conn  # type: ignore[misc,assignment]
    submitter = ts.TaskSubmitter(Worker())  # type: ignore[arg-type]
    first = task(0)
    submitter.submit_many([first])
    deadline = time.time() + 5
    while not CONNS and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    conn: Any = CONNS[0]
    submitter._on_results(conn, [common_pb2.TaskResult(task_id=first.task_id)])
    calls = int(os.environ.get("N", 20000))
    samples, i = [], 1
    for _ in range(7):
        start = time.thread_time()
        for _ in range(calls):
            t = task(i)
            i += 1
            submitter.submit_many([t])
            submitter._on_results(conn, [common_pb2.TaskResult(task_id=t.task_id)])
        samples.append((time.thread_time() - start) / calls * 1e6)
    print(round(statistics.median(samples), 2), round(min(samples), 2))
    os._exit(0)  # the waiting lease requests' threads never end


if __name__ == "__main__":
    main()
