"""``storage_from_url``: the backend a configuration names."""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import unquote, urlsplit

from gateway_kit.exceptions import MissingExtraError
from gateway_kit.storage.base import Storage

__all__ = ["REDIS_SCHEMES", "check_storage_url", "sqlite_path", "storage_from_url"]

#: The URL schemes of ``RedisStorage`` (the ``redis`` extra).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})


def check_storage_url(url: str) -> str:
    """The scheme of ``url`` when ``storage_from_url`` accepts its form, else ``ValueError``.

    Only the form is checked (nothing is opened or imported); the message never repeats the
    URL, which may hold a password.
    """
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if scheme == "sqlite":
        # As in SQLAlchemy: three slashes then a relative path, four for an absolute one.
        path = unquote(url.partition("://")[2])
        if not path.startswith("/") or path == "/":
            raise ValueError("a SQLite URL is sqlite:///<path>, e.g. sqlite:///gateway.db")
    elif scheme != "memory" and scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"unknown storage URL scheme {scheme!r}: use memory://, sqlite:///<path> or redis://..."
        )
    return scheme


def sqlite_path(url: str) -> str | None:
    """The file a ``sqlite:///`` URL names (relative to the working directory unless it has a
    fourth slash), ``None`` for other schemes."""
    if check_storage_url(url) != "sqlite":
        return None
    return unquote(url.partition("://")[2])[1:]


def storage_from_url(url: str, *, redis_prefix: str | None = None, **options: Any) -> Storage:
    """Build the backend a URL names; ``options`` go to its constructor.

    - ``memory://``: ``MemoryStorage`` (options ``max_keys``, ``clock``)
    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``: ``SQLiteStorage``
    - ``redis://[:password@]host:port/db`` (and ``rediss://``, ``unix://``): ``RedisStorage``

    ``redis_prefix`` is the key prefix of a Redis backend (``redis://``, ``rediss://`` and
    ``unix://`` alike) and ignored by the others, so one configuration serves every scheme.
    An unknown scheme raises ``ValueError``, whose message never repeats the URL (it may hold
    a password); a Redis URL without the ``redis`` extra installed, ``MissingExtraError``.
    """
    scheme = check_storage_url(url)
    if scheme == "memory":
        from gateway_kit.storage.memory import MemoryStorage

        return MemoryStorage(**options)
    if scheme == "sqlite":
        from gateway_kit.storage.sqlite import SQLiteStorage

        path = sqlite_path(url)
        assert path is not None
        return SQLiteStorage(path, **options)
    try:
        # The client's package itself, not just our module: that may be imported already.
        importlib.import_module("redis")
    except ImportError:
        raise MissingExtraError(
            "storage.url", f"{scheme}://", extra="redis", module="redis"
        ) from None
    from gateway_kit.storage.redis import RedisStorage

    if redis_prefix is not None:
        options = {"prefix": redis_prefix, **options}
    return RedisStorage(url, **options)
