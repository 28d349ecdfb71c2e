"""Users' own metrics, as Ray's ``ray.util.metrics``: :class:`Counter`, :class:`Gauge`
and :class:`Histogram`, from a driver, a task or an actor.

Each process keeps its metrics and writes them to its node's session folder about once
a second (and at exit); the node's raylet serves them on its Prometheus endpoint, summed
over the node's processes (a gauge: the value set last), and with ``OTEL_METRICS_EXPORTER=
otlp`` they go out over OTLP too. A process's counts outlive it: a worker reaped right
after its task keeps its counts. See docs/metrics.md.

    from tracedray.util.metrics import Counter
    requests = Counter("requests", description="Requests served", tag_keys=("route",))
    requests.inc(tags={"route": "/a"})
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tracedray.metrics.snapshot import COUNTER, GAUGE, HISTOGRAM, process_metrics

__all__ = ["Counter", "Gauge", "Histogram", "Metric"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TAG_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The runtime's own families: a user's metric of that name would collide with them.
_RESERVED_PREFIX = "tracedray_"


class Metric:
    """What the three kinds share: a name, a description, tag keys and default tags."""

    _kind = ""

    def __init__(self, name: str, description: str = "",
                 tag_keys: Sequence[str] | None = None,
                 boundaries: Sequence[float] = ()) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        if not _NAME.match(name):
            raise ValueError(f"metric name {name!r} is invalid: use letters, digits, '_' and "
                             f"':', not starting with a digit (Prometheus names)")
        if name.startswith(_RESERVED_PREFIX):
            raise ValueError(f"metric name {name!r} starts with {_RESERVED_PREFIX!r}, which is "
                             f"reserved for tracedray's own metrics; choose another name")
        if tag_keys is None:
            tag_keys = ()
        if isinstance(tag_keys, str) or not isinstance(tag_keys, Sequence):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(tag_keys)}")
        for key in tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
            if not _TAG_KEY.match(key):
                raise ValueError(f"tag key {key!r} is invalid: use letters, digits and '_'")
        self._name = name
        self._description = description
        self._tag_keys = tuple(tag_keys)
        self._default_tags: dict[str, str] = {}
        self._family = process_metrics().declare(name, self._kind, description,
                                                 self._tag_keys, tuple(boundaries))

    def set_default_tags(self, default_tags: Mapping[str, str]) -> Metric:
        """Tags used when a call gives none for those keys (Ray's ``set_default_tags``)."""
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key!r}.")
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        self._default_tags = dict(default_tags)
        return self

    @property
    def info(self) -> dict[str, Any]:
        return {"name": self._name, "description": self._description,
                "tag_keys": self._tag_keys, "default_tags": dict(self._default_tags)}

    def _labels(self, tags: Mapping[str, str] | None) -> tuple[str, ...]:
        if not self._tag_keys:
            if tags:
                raise ValueError(f"Unrecognized tag keys {sorted(tags)}: metric "
                                 f"{self._name!r} declares no tag keys.")
            return ()
        merged = {**self._default_tags, **(tags or {})}
        unknown = set(merged) - set(self._tag_keys)
        if unknown:
            raise ValueError(f"Unrecognized tag keys {sorted(unknown)} for metric "
                             f"{self._name!r}; its tag keys are {list(self._tag_keys)}.")
        missing = [k for k in self._tag_keys if k not in merged]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        for value in merged.values():
            if not isinstance(value, str):
                raise TypeError(f"Tag values must be str, got {type(value)}.")
        return tuple(merged[k] for k in self._tag_keys)


class Counter(Metric):
    """A cumulative count (exported as ``<name>_total``)."""

    _kind = COUNTER

    def __init__(self, name: str, description: str = "",
                 tag_keys: Sequence[str] | None = None) -> None:
        super().__init__(name, description, tag_keys)

    def inc(self, value: float = 1.0, tags: Mapping[str, str] | None = None) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"value must be a number, got {type(value)}")
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        process_metrics().add(self._family, self._labels(tags), float(value))


class Gauge(Metric):
    """A value that goes up and down; the latest ``set`` wins."""

    _kind = GAUGE

    def __init__(self, name: str, description: str = "",
                 tag_keys: Sequence[str] | None = None) -> None:
        super().__init__(name, description, tag_keys)

    def set(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"value must be a number, got {type(value)}")
        process_metrics().set(self._family, self._labels(tags), float(value))


class Histogram(Metric):
    """Observations counted in buckets whose upper bounds are ``boundaries``."""

    _kind = HISTOGRAM

    def __init__(self, name: str, description: str = "",
                 boundaries: Sequence[float] | None = None,
                 tag_keys: Sequence[str] | None = None) -> None:
        if not boundaries:
            raise ValueError("boundaries argument should be provided when using the "
                             "Histogram class. e.g., Histogram(\"name\", boundaries=[1.0, 2.0])")
        previous = None
        for i, bound in enumerate(boundaries):
            if not isinstance(bound, int | float) or bound <= 0:
                raise ValueError(f"Invalid `boundaries` argument at index {i}, {boundaries}. "
                                 f"Use positive values for the arguments.")
            if previous is not None and bound <= previous:
                raise ValueError(f"`boundaries` must be strictly increasing, got {boundaries}")
            previous = bound
        self._boundaries = tuple(float(b) for b in boundaries)
        super().__init__(name, description, tag_keys, self._boundaries)

    def observe(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"value must be a number, got {type(value)}")
        process_metrics().observe(self._family, self._labels(tags), float(value))

    @property
    def info(self) -> dict[str, Any]:
        return {**super().info, "boundaries": list(self._boundaries)}
