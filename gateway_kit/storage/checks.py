"""Argument checks every backend applies the same way (a third-party backend should too).

Bad keys, queue names, item ids and fields raise ``InvalidKeyError``; values of the wrong type
raise ``TypeError``; numbers out of range raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway_kit.exceptions import InvalidKeyError

if TYPE_CHECKING:
    from gateway_kit.storage.base import Increment, Throttle

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_KEY_BYTES",
    "check_batch",
    "check_count",
    "check_key",
    "check_name",
    "check_partition",
    "check_queue",
    "check_seconds",
    "check_time",
    "check_value",
    "check_values",
    "partition_of",
]

#: The longest key, queue name, item id or map field, in UTF-8 bytes.
MAX_KEY_BYTES = 512
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def check_name(name: object, what: str = "name") -> str:
    """A non-empty str of at most ``MAX_KEY_BYTES`` UTF-8 bytes (item ids, map fields)."""
    if not isinstance(name, str):
        raise InvalidKeyError(f"storage {what} must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidKeyError(f"storage {what} is empty")
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidKeyError(f"storage {what} is not valid Unicode text") from None
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"storage {what} is {size} bytes long, over the {MAX_KEY_BYTES}-byte maximum"
        )
    return name


def _no_braces(text: str, what: str) -> None:
    # Redis makes this text a Cluster hash tag, ``{text}``: a brace would cut the tag short.
    if "{" in text or "}" in text:
        raise InvalidKeyError(f"storage {what} {text[:80]!r} contains a brace")


def check_key(key: object) -> str:
    """Validate a key and return its partition (the text before the first ``:``)."""
    name = check_name(key, "key")
    partition, sep, rest = name.partition(":")
    if not (sep and partition and rest):
        raise InvalidKeyError(
            f"storage key {name[:80]!r} has no partition: expected '<partition>:<name>', "
            "e.g. 'ws_abc123:quota'"
        )
    _no_braces(partition, "key partition")
    return partition


def check_partition(partition: object) -> str:
    """A partition's name, as the part of a key before its first ``:``."""
    name = check_name(partition, "partition")
    if ":" in name:
        raise InvalidKeyError(f"partition {name[:80]!r} cannot hold ':'")
    _no_braces(name, "partition")
    return name


def partition_of(key: str) -> str:
    """The partition of a key already checked (an ``Increment``'s or a ``Throttle``'s)."""
    return key.partition(":")[0]


def check_queue(queue: object) -> str:
    """A queue name: like an item id, without braces."""
    name = check_name(queue, "queue name")
    _no_braces(name, "queue name")
    return name


def check_batch(
    increments: Sequence[Increment], throttle: Throttle | None, reads: Sequence[str] = ()
) -> list[str]:
    """An ``incr_many`` spans one partition and increments each key once; returns its read
    keys, checked like ``get``'s and each named once. (The other keys were checked when their
    ``Increment`` or ``Throttle`` was made.) A key may be both read and incremented."""
    keys = [inc.key for inc in increments]
    if throttle is not None:
        keys.append(throttle.key)
    if len(set(keys)) != len(keys):
        raise InvalidKeyError("incr_many names the same key twice")
    partitions = {partition_of(key) for key in keys}
    if reads:
        if isinstance(reads, str | bytes):
            raise TypeError("incr_many reads is a sequence of keys, not one key")
        partitions.update(check_key(key) for key in reads)
    if len(partitions) > 1:
        raise InvalidKeyError(
            f"incr_many spans several partitions ({', '.join(sorted(partitions))}): "
            "its keys must share the text before the first ':'"
        )
    return list(dict.fromkeys(reads)) if reads else []  # a key read twice is read once


def check_value(value: object) -> bytes:
    """Values are bytes: serialization belongs to the caller."""
    if not isinstance(value, bytes):
        raise TypeError(f"storage values are bytes, not {type(value).__name__}")
    return value


def check_values(values: object) -> list[bytes]:
    """A sequence of values (not one value: bytes are a sequence too)."""
    if isinstance(values, bytes | str) or not isinstance(values, Sequence):
        raise TypeError("storage values are a sequence of bytes values")
    return [check_value(value) for value in values]


def check_count(value: object, what: str, *, low: int = 1) -> int:
    """An int from ``low`` to ``INT64_MAX`` (bools are not counts)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= INT64_MAX:
        raise ValueError(f"{what} must be an integer from {low} to {INT64_MAX}")
    return value


def check_time(value: object, what: str) -> float:
    """A finite number of seconds (a point in time such as ``due_at``)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite")
    return float(value)


def check_seconds(value: object, what: str) -> float:
    """A positive, finite duration in seconds (``ttl``, ``lease``, ``period``)."""
    seconds = check_time(value, what)
    if seconds <= 0:
        raise ValueError(f"{what} must be a positive number of seconds")
    return seconds
