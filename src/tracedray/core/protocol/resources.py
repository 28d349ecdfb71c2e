"""Resource arithmetic shared by the GCS (actor placement), the raylets (leasing) and
callers (the infeasible-work warning): a request fits what is available, is feasible on a
node's total, and is acquired from or released to an availability map."""

from __future__ import annotations

from collections.abc import Mapping

Resources = Mapping[str, float]
EPSILON = 1e-9


def fits(available: Resources, request: Resources) -> bool:
    return all(available.get(name, 0.0) + EPSILON >= amount for name, amount in request.items()
               if amount > 0)


def feasible(total: Resources, request: Resources) -> bool:
    return fits(total, request)


def acquire(available: dict[str, float], request: Resources) -> None:
    for name, amount in request.items():
        available[name] = available.get(name, 0.0) - amount


def release(available: dict[str, float], request: Resources) -> None:
    for name, amount in request.items():
        available[name] = available.get(name, 0.0) + amount
