"""Utilities: serializability inspection and the state API."""

from tracedray.core.serializability import describe_unserializable, inspect_serializability

__all__ = ["describe_unserializable", "inspect_serializability"]
