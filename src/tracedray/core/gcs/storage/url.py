"""Parsing ``--gcs-storage`` values: a pure function, so bad input fails before any I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from tracedray.exceptions import ConfigError

ACCEPTED_FORMS = (
    "'memory' (the default), 'redis://[:password@]host[:port][/db]', "
    "'rediss://[:password@]host[:port][/db]' (TLS), 'unix:///path/to/redis.sock[?db=N]'"
)
REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class StorageSpec:
    kind: Literal["memory", "redis"]
    url: str  # what the redis client connects to ("memory" for the embedded kind)
    display: str  # the URL with any password masked, safe for logs, spans and errors


def redact(url: str) -> str:
    """Mask the password of a ``scheme://user:password@host`` URL."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _fail(url: str, reason: str) -> ConfigError:
    return ConfigError(
        f"invalid GCS storage {redact(url)!r}: {reason}. Accepted forms: {ACCEPTED_FORMS}"
    )


def _check_db(url: str, db: str) -> None:
    if not db.isdigit():
        raise _fail(url, f"the database number must be a non-negative integer, got {db!r}")


def parse_storage_url(url: str) -> StorageSpec:
    """Validate a storage URL; raise :class:`ConfigError` naming it and the accepted forms."""
    text = url.strip()
    if text == "memory":
        return StorageSpec("memory", "memory", "memory")
    if not text:
        raise _fail(url, "it is empty")
    if "://" not in text:
        raise _fail(url, f"no scheme (did you mean 'redis://{redact(text)}'?)")
    parts = urlsplit(text)
    if parts.scheme not in REDIS_SCHEMES:
        raise _fail(url, f"unknown scheme {parts.scheme!r}")
    query = parse_qs(parts.query)
    for db in query.get("db", []):
        _check_db(url, db)
    if parts.scheme == "unix":
        if not parts.path or parts.path == "/":
            raise _fail(url, "a unix URL needs the socket path")
        return StorageSpec("redis", text, redact(text))
    if not parts.hostname:
        raise _fail(url, "no host")
    try:
        parts.port  # noqa: B018 -- the property validates the port
    except ValueError as exc:
        raise _fail(url, f"bad port ({exc})") from exc
    db_path = parts.path.lstrip("/")
    if db_path:
        _check_db(url, db_path)
    return StorageSpec("redis", text, redact(text))
