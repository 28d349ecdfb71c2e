"""A log line as an action: the pure decisions (the raylet's lease book, the GCS's actor
lifecycle) return it, and their I/O shells write it after releasing their locks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogLine:
    level: str  # "debug" | "info" | "warning"
    event: str
    fields: Mapping[str, object]

    def write(self, logger: Any) -> None:
        getattr(logger, self.level)(self.event, **self.fields)
