"""``get_runtime_context()``: where the current code runs."""

from __future__ import annotations

from typing import Any

from tracedray.api import runtime


class RuntimeContext:
    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def get_node_id(self) -> str:
        return str(self._worker.node_id)

    def get_job_id(self) -> str:
        return str(self._worker.current_job_id().hex())

    def get_task_id(self) -> str | None:
        spec = self._worker.current_task
        return spec.task_id.hex() if spec is not None else None

    def get_actor_id(self) -> str | None:
        executor = getattr(self._worker, "executor", None)
        if executor is not None and executor.actor_id:
            return str(executor.actor_id.hex())
        return None

    def get_worker_id(self) -> str:
        return str(self._worker.worker_id)

    @property
    def namespace(self) -> str:
        return str(self._worker.namespace)

    def get(self) -> dict[str, Any]:
        return {"node_id": self.get_node_id(), "job_id": self.get_job_id(),
                "task_id": self.get_task_id(), "actor_id": self.get_actor_id()}


def get_runtime_context() -> RuntimeContext:
    return RuntimeContext(runtime.global_runtime().worker)
