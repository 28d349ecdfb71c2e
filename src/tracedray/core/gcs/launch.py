"""How a GCS process is launched: one frozen spec, shared by the first start and every restart.

The head's process that starts the cluster builds a :class:`GcsLaunchSpec`; the head
raylet (the GCS's supervisor) receives the same spec as JSON, so a restarted GCS gets
exactly the storage, flush policy and — crucially — the port the first one had:
raylets and drivers hold that address and reconnect to it on their own.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tracedray.core.gcs.storage.policy import FlushPolicy
from tracedray.exceptions import ConfigError

GCS_MODULE = "tracedray.core.gcs.main"


@dataclass(frozen=True)
class GcsLaunchSpec:
    session_dir: Path
    host: str
    port: int  # 0 only for the first start: a restart always reuses the bound port
    storage: str
    flushing: bool = True
    flush_policy: FlushPolicy = field(default_factory=FlushPolicy)

    @property
    def ready_file(self) -> Path:
        return self.session_dir / "gcs.ready"

    def with_port(self, port: int) -> GcsLaunchSpec:
        return GcsLaunchSpec(self.session_dir, self.host, port, self.storage, self.flushing,
                             self.flush_policy)

    def argv(self, *, parent_pid: int) -> list[str]:
        """Arguments of ``python -m tracedray.core.gcs.main``."""
        policy = self.flush_policy
        args = ["--session-dir", str(self.session_dir), "--port", str(self.port),
                "--host", self.host, "--storage", self.storage,
                "--parent-pid", str(parent_pid), "--ready-file", str(self.ready_file),
                "--flush-interval", repr(policy.interval_s),
                "--flush-max-hot-entries", str(policy.max_hot_entries),
                "--flush-min-age", repr(policy.min_age_s),
                "--flush-max-live-entries", str(policy.max_live_entries)]
        if not self.flushing:
            args.append("--no-flush")
        return args

    def to_json(self) -> str:
        data = asdict(self)
        data["session_dir"] = str(self.session_dir)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GcsLaunchSpec:
        try:
            data = json.loads(text)
            return cls(session_dir=Path(data["session_dir"]), host=str(data["host"]),
                       port=int(data["port"]), storage=str(data["storage"]),
                       flushing=bool(data["flushing"]),
                       flush_policy=FlushPolicy(**data["flush_policy"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"malformed GCS launch spec {text!r}: {exc}") from exc
