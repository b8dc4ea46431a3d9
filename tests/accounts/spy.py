"""``StorageSpy``: a storage wrapper that records every call, and can fail or hold some."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio

from gateway_kit.accounts.changes import FEED_KEY
from gateway_kit.exceptions import StorageError


class StorageSpy:
    """Delegates to ``inner``; ``calls`` lists ``(method, key)`` of every async call.

    ``failing(method, key)`` true makes that call raise ``StorageError``. ``hold_get(prefix)``
    makes the next ``get`` of a key under ``prefix`` read its value, set ``held`` and wait for
    ``release`` before answering: a read that was made before something else happened, but
    arrives after it.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self.failing: Callable[[str, str], bool] = lambda method, key: False
        self._hold: str | None = None
        self.held = anyio.Event()
        self.release = anyio.Event()

    def hold_get(self, prefix: str) -> None:
        self._hold = prefix

    def reads(self) -> list[str]:
        """Keys read so far, the change feed's polls left out."""
        return [key for method, key in self.calls if method == "get" and key != FEED_KEY]

    def polls(self) -> int:
        return self.calls.count(("get", FEED_KEY))

    def background(self) -> int:
        """Calls the gateway makes on its own: the change feed's polls, and the routing health
        refresh (an ``incr_many`` of reads only)."""
        return self.polls() + self.calls.count(("incr_many", ""))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            key = args[0] if args and isinstance(args[0], str) else ""
            self.calls.append((name, key))
            if self.failing(name, key):
                raise StorageError("storage is down")
            result = await attr(*args, **kwargs)
            if name == "get" and self._hold is not None and key.startswith(self._hold):
                self._hold = None
                self.held.set()
                await self.release.wait()
            return result

        return call
