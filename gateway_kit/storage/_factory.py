"""``storage_from_url``: the backend a configuration names."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from gateway_kit.storage.base import Storage

__all__ = ["storage_from_url"]


def storage_from_url(url: str, *, redis_prefix: str | None = None, **options: Any) -> Storage:
    """Build the backend a URL names; ``options`` go to its constructor.

    - ``memory://``: ``MemoryStorage`` (options ``max_keys``, ``clock``)
    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``: ``SQLiteStorage``
    - ``redis://[:password@]host:port/db`` (and ``rediss://``, ``unix://``): ``RedisStorage``

    ``redis_prefix`` is the key prefix of a Redis backend (``redis://``, ``rediss://`` and
    ``unix://`` alike) and ignored by the others, so one configuration serves every scheme.
    An unknown scheme raises ``ValueError``, whose message never repeats the URL (it may hold
    a password).
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from gateway_kit.storage.memory import MemoryStorage

        return MemoryStorage(**options)
    if scheme == "sqlite":
        from gateway_kit.storage.sqlite import SQLiteStorage

        # As in SQLAlchemy: three slashes then a relative path, four for an absolute one.
        path = unquote(url.split("://", 1)[1])
        if not path.startswith("/") or path == "/":
            raise ValueError("a SQLite URL is sqlite:///<path>, e.g. sqlite:///gateway.db")
        return SQLiteStorage(path[1:], **options)
    if scheme in {"redis", "rediss", "unix"}:
        from gateway_kit.storage.redis import RedisStorage

        if redis_prefix is not None:
            options = {"prefix": redis_prefix, **options}
        return RedisStorage(url, **options)
    raise ValueError(
        f"unknown storage URL scheme {scheme!r}: use memory://, sqlite:///<path> or redis://..."
    )
