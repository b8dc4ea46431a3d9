"""``held``: one writer at a time for a read-modify-write of a stored record, across processes.

Changing an account record (a key's secrets, a workspace's settings, its webhooks) reads it,
changes it and writes it back; two such changes at once, from one process or two, would each
write over the other's (a rotation's new secret left working outside the key's record, where
revoking cannot reach it). ``held`` takes a lock value in storage (``set`` if absent, with a
token of its own and a TTL), waits for it with a growing back-off while another holder has it,
and gives it back only if it is still its own (``cas``). A holder that dies keeps it at most
``ttl`` seconds. The work done under it is a few storage operations: milliseconds, far inside
the TTL.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from gateway_kit.exceptions import StorageError
from gateway_kit.storage.base import Storage

__all__ = ["held"]

_FIRST_WAIT_S = 0.002
_LONGEST_WAIT_S = 0.05


@asynccontextmanager
async def held(
    storage: Storage, key: str, *, ttl: float = 10.0, wait: float = 10.0
) -> AsyncIterator[None]:
    """Hold the lock ``key`` (a storage key: ``<partition>:lock:<what>``) for the block;
    ``StorageError`` if another holder kept it more than ``wait`` seconds."""
    token = secrets.token_hex(16).encode()
    deadline = time.monotonic() + wait
    pause = _FIRST_WAIT_S
    while not await storage.set(key, token, ttl=ttl, if_absent=True):
        if time.monotonic() >= deadline:
            raise StorageError(f"{key} is held by another change; try again")
        await anyio.sleep(pause)
        pause = min(pause * 2, _LONGEST_WAIT_S)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await storage.cas(key, token, None)  # only if it is still ours
