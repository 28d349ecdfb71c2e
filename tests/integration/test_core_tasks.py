"""Tasks, objects and the read-only API through a real cluster (GCS, raylet, workers).

These tests share one cluster: none of them kills processes or fills the store.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time
from typing import Any

import cloudpickle
import numpy as np
import pytest

import tracedray
from tracedray import exceptions

# Workers cannot import test modules: ship this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
def double(x: int) -> int:
    return x * 2


@tracedray.remote
def add(a: Any, b: Any) -> Any:
    return a + b


@tracedray.remote
def echo(*args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    return args, kwargs


@tracedray.remote(num_returns=3)
def three(x: int) -> tuple[int, int, int]:
    return x, x + 1, x + 2


@tracedray.remote
def kinds(container: Any) -> list[str]:
    return [type(item).__name__ for item in container]


@tracedray.remote
def resolve_nested(container: list[Any]) -> list[Any]:
    return tracedray.get(container)


@tracedray.remote
def fan_out(n: int) -> int:
    return sum(tracedray.get([double.remote(i) for i in range(n)]))


@tracedray.remote
def sleep_then(value: Any, seconds: float) -> Any:
    time.sleep(seconds)
    return value


@tracedray.remote
def context_ids() -> dict[str, Any]:
    ctx = tracedray.get_runtime_context()
    return {"node": ctx.get_node_id(), "task": ctx.get_task_id(), "job": ctx.get_job_id(),
            "actor": ctx.get_actor_id()}


@tracedray.remote
def nested_job_id() -> tuple[str, str]:
    outer = tracedray.get_runtime_context().get_job_id()
    return outer, tracedray.get(context_ids.remote())["job"]


class CustomError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"custom failure {code}")
        self.code = code


@tracedray.remote(max_retries=0)
def raise_custom(code: int) -> None:
    raise CustomError(code)


@tracedray.remote(max_retries=0)
def raise_value_error() -> None:
    raise ValueError("bad value from the task")


@tracedray.remote
def depends_on_failure(value: Any) -> Any:
    return value


@tracedray.remote
def array_sum(array: np.ndarray) -> float:
    return float(array.sum())


@tracedray.remote
def make_array(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64)


def test_args_kwargs_and_defaults(shared_ray: Any) -> None:
    ray = shared_ray
    assert ray.get(double.remote(21)) == 42
    args, kwargs = ray.get(echo.remote(1, "two", [3], key="value", other=None))
    assert args == (1, "two", [3])
    assert kwargs == {"key": "value", "other": None}


def test_num_returns(shared_ray: Any) -> None:
    ray = shared_ray
    refs = three.remote(10)
    assert isinstance(refs, list) and len(refs) == 3
    assert ray.get(refs) == [10, 11, 12]
    assert len(set(refs)) == 3
    assert ray.get(three.options(num_returns=3).remote(1)) == [1, 2, 3]


def test_dag_with_refs_as_arguments(shared_ray: Any) -> None:
    ray = shared_ray
    level = [double.remote(i) for i in range(8)]
    while len(level) > 1:
        level = [add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    assert ray.get(level[0]) == 2 * sum(range(8))
    # kwargs refs resolve too
    assert ray.get(add.remote(a=double.remote(1), b=ray.put(5))) == 7


def test_refs_nested_in_containers_stay_refs(shared_ray: Any) -> None:
    ray = shared_ray
    inner = [double.remote(1), ray.put("x")]
    assert ray.get(kinds.remote(inner)) == ["ObjectRef", "ObjectRef"]
    assert ray.get(kinds.remote((inner[0], {"nested": 1}))) == ["ObjectRef", "dict"]
    assert ray.get(resolve_nested.remote(inner)) == [2, "x"]


@tracedray.remote
def rendezvous(log: str, parties: int) -> bool:
    """True if ``parties`` tasks were running at the same time."""
    with open(log, "a") as handle:
        handle.write("x\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(log) as handle:
            if len(handle.read().split()) >= parties:
                return True
        time.sleep(0.01)
    return False


def test_tasks_run_in_parallel_on_free_cpus(shared_ray: Any, tmp_path: Any) -> None:
    ray = shared_ray
    ray.get(double.remote(0))  # a warm lease exists: new tasks must not all queue behind it
    log = tmp_path / "rendezvous"
    assert ray.get([rendezvous.remote(str(log), 2) for _ in range(2)], timeout=60) == [True] * 2


def test_nested_tasks_submit_and_wait(shared_ray: Any) -> None:
    assert shared_ray.get(fan_out.remote(6)) == 2 * sum(range(6))
    # more nested waiters than CPUs: each blocked waiter must give its CPU back
    outers = [fan_out.remote(3) for _ in range(5)]
    assert shared_ray.get(outers, timeout=60) == [6] * 5


def test_nested_task_keeps_job_id(shared_ray: Any) -> None:
    ray = shared_ray
    driver_job = ray.get_runtime_context().get_job_id()
    outer, inner = ray.get(nested_job_id.remote())
    assert outer == driver_job
    assert inner == driver_job


def test_get_list_and_timeout(shared_ray: Any) -> None:
    ray = shared_ray
    assert ray.get([double.remote(i) for i in range(5)]) == [0, 2, 4, 6, 8]
    assert ray.get([]) == []
    slow = sleep_then.remote("late", 1.5)
    started = time.monotonic()
    with pytest.raises(exceptions.GetTimeoutError) as info:
        ray.get(slow, timeout=0.2)
    assert time.monotonic() - started < 2.0
    assert isinstance(info.value, TimeoutError)
    assert ray.get(slow, timeout=30) == "late"


def test_put_get_numpy_zero_copy_read_only(shared_ray: Any) -> None:
    ray = shared_ray
    array = np.arange(2_000_000, dtype=np.float64)  # 16 MB: lives in shared memory
    ref = ray.put(array)
    first = ray.get(ref)
    second = ray.get(ref)
    np.testing.assert_array_equal(first, array)
    assert not first.flags.writeable
    assert not first.flags.owndata
    # both reads point straight into the object's shared-memory file: no copy was made
    assert _mapped_file(first.ctypes.data).startswith("/dev/shm/tracedray-")
    assert _mapped_file(first.ctypes.data) == _mapped_file(second.ctypes.data)
    with pytest.raises(ValueError):
        first[0] = 1.0
    assert ray.get(array_sum.remote(ref)) == float(array.sum())
    result = ray.get(make_array.remote(1_000_000))
    assert not result.flags.writeable and result[-1] == 999_999
    small = ray.get(ray.put({"k": [1, 2]}))
    assert small == {"k": [1, 2]}


def _mapped_file(address: int) -> str:
    """The file mapped at ``address`` in this process ("" for anonymous memory)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(part, 16) for part in fields[0].split("-"))
            if start <= address < end:
                return fields[5] if len(fields) > 5 else ""
    return ""


def test_put_rejects_object_ref(shared_ray: Any) -> None:
    ref = shared_ray.put(1)
    with pytest.raises(TypeError):
        shared_ray.put(ref)


def test_wait_num_returns_and_timeout(shared_ray: Any) -> None:
    ray = shared_ray
    fast = [double.remote(i) for i in range(3)]
    slow = sleep_then.remote("slow", 2.0)
    ray.get(fast)
    ready, not_ready = ray.wait([*fast, slow], num_returns=3, timeout=10)
    assert set(ready) == set(fast) and not_ready == [slow]
    started = time.monotonic()
    ready, not_ready = ray.wait([slow], num_returns=1, timeout=0.2)
    assert ready == [] and not_ready == [slow]
    assert time.monotonic() - started < 2.0
    ready, not_ready = ray.wait(fast, num_returns=1)
    assert len(ready) == 1 and len(not_ready) == 2
    ready, _ = ray.wait([slow], fetch_local=True, timeout=30)
    assert ready == [slow]
    with pytest.raises(ValueError):
        ray.wait(fast, num_returns=4)
    with pytest.raises(TypeError):
        ray.wait(fast[0])


def test_object_ref_identity_and_pickling(shared_ray: Any) -> None:
    ray = shared_ray
    ref = double.remote(4)
    assert isinstance(ref, ray.ObjectRef)
    assert len(ref.hex()) == 40 and int(ref.hex(), 16) >= 0
    assert ref.hex().startswith(ref.task_id().hex())
    same = pickle.loads(pickle.dumps(ref))
    assert same == ref and hash(same) == hash(ref)
    assert ref != double.remote(4)
    assert {ref: 1}[same] == 1
    assert ray.get(same) == 8
    assert "ObjectRef(" in repr(ref)


def test_runtime_context_ids(shared_ray: Any) -> None:
    ray = shared_ray
    ctx = ray.get_runtime_context()
    driver_node = ctx.get_node_id()
    assert driver_node and ctx.get_task_id() is None and ctx.get_actor_id() is None
    inside = ray.get(context_ids.remote())
    assert inside["node"] == driver_node
    assert inside["job"] == ctx.get_job_id()
    assert inside["task"] and len(inside["task"]) == 32
    assert inside["actor"] is None


def test_cluster_information(shared_ray: Any) -> None:
    ray = shared_ray
    nodes = ray.nodes()
    assert len(nodes) == 1
    node = nodes[0]
    assert node["Alive"] and node["NodeID"] == ray.get_runtime_context().get_node_id()
    assert node["Resources"]["CPU"] == 2.0
    assert ray.cluster_resources()["CPU"] == 2.0
    available = ray.available_resources()
    assert 0.0 <= available.get("CPU", 0.0) <= 2.0
    assert ray.is_initialized()


def test_task_error_is_original_type_with_remote_traceback(shared_ray: Any) -> None:
    ray = shared_ray
    with pytest.raises(ValueError) as info:
        ray.get(raise_value_error.remote())
    error = info.value
    assert isinstance(error, exceptions.RayTaskError)
    assert "bad value from the task" in str(error)
    assert "raise_value_error" in str(error)  # the function
    assert "pid=" in str(error) and error.pid > 0  # the process
    assert error.node_id == ray.get_runtime_context().get_node_id()
    assert 'raise ValueError("bad value from the task")' in error.traceback_str
    with pytest.raises(CustomError) as custom:
        ray.get(raise_custom.remote(7))
    assert custom.value.code == 7
    assert isinstance(custom.value, exceptions.RayTaskError)


def test_errors_propagate_along_a_dag(shared_ray: Any) -> None:
    ray = shared_ray
    with pytest.raises(ValueError):
        ray.get(depends_on_failure.remote(raise_value_error.remote()))


def test_unpicklable_argument_names_the_culprit(shared_ray: Any) -> None:
    lock = threading.Lock()
    with pytest.raises(exceptions.SerializationError) as info:
        double.remote(lock)
    message = str(info.value)
    assert "argument 0" in message and "double" in message and "lock" in message
    assert isinstance(info.value, TypeError)

    def uses_lock() -> None:
        return lock.locked()  # type: ignore[return-value]

    with pytest.raises(exceptions.SerializationError) as captured:
        tracedray.remote(uses_lock).remote()
    assert "lock" in str(captured.value)


def test_unpicklable_return_value_names_the_culprit(shared_ray: Any) -> None:
    @tracedray.remote(max_retries=0)
    def returns_lock() -> Any:
        return threading.Lock()

    with pytest.raises(exceptions.RayError) as info:
        shared_ray.get(returns_lock.remote())
    assert "lock" in str(info.value).lower()
    assert "return" in str(info.value).lower()


def test_misuse_gives_clear_errors(shared_ray: Any) -> None:
    ray = shared_ray

    def plain(x: int) -> int:
        return x

    with pytest.raises(AttributeError):
        plain.remote(1)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="cannot be called directly"):
        double(1)
    with pytest.raises(TypeError, match="ObjectRef"):
        ray.get(42)
    with pytest.raises(TypeError, match="forget .remote"):
        ray.get(double)
    with pytest.raises(exceptions.ConfigError, match="num_cpu"):
        double.options(num_cpu=1)
    with pytest.raises(exceptions.ConfigError, match="max_retries"):
        double.options(max_retries="3")
    with pytest.raises(ValueError):
        ray.get(ray.put(1), timeout=-1)


def test_tutorial_parallel_tasks(shared_ray: Any) -> None:
    ray = shared_ray

    @ray.remote
    def f(x: int) -> int:
        return x * x

    futures = [f.remote(i) for i in range(4)]
    assert ray.get(futures) == [0, 1, 4, 9]


def test_tutorial_tree_aggregation_with_futures_as_arguments(shared_ray: Any) -> None:
    ray = shared_ray

    @ray.remote
    def create_matrix(size: int) -> np.ndarray:
        return np.random.normal(size=size)

    @ray.remote
    def combine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x + y

    values = [create_matrix.remote(1000) for _ in range(16)]
    while len(values) > 1:
        values = values[2:] + [combine.remote(values[0], values[1])]
    assert ray.get(values[0]).shape == (1000,)
