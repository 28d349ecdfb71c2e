"""The store's bounded memories: frees that came before their object's seal, and why
seals were refused."""

from __future__ import annotations

from collections import OrderedDict

# How many frees of objects not (yet) held, and refused seals, are remembered.
REMEMBERED = 4096


class Remembered:
    """Up to ``limit`` keys with a message each; the oldest is forgotten first.
    Not thread-safe: the store uses it under its lock."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._items: OrderedDict[str, str] = OrderedDict()

    def remember(self, key: str, value: str) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, key: str) -> str | None:
        return self._items.get(key)

    def pop(self, key: str) -> str | None:
        return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
