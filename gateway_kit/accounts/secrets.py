"""``DeploymentSecret``: a key every gateway sharing a storage agrees on, for keyed hashes
(Guardian's request hashes, PII masking's placeholders): the configured one, else one drawn
at random the first time and kept in the storage, read once per process."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from pydantic import SecretStr

from gateway_kit.storage import Storage

__all__ = ["DeploymentSecret"]


class DeploymentSecret:
    def __init__(
        self, storage: Callable[[], Storage], key: str, configured: SecretStr | None = None
    ) -> None:
        self._storage = storage
        self._key = key
        self._value = None if configured is None else configured.get_secret_value().encode()

    async def get(self) -> bytes:
        """The secret (from the storage the first time, made there if it has none)."""
        if self._value is None:
            storage = self._storage()
            await storage.set(self._key, secrets.token_hex(32).encode(), if_absent=True)
            stored = await storage.get(self._key)
            assert stored is not None
            self._value = stored
        return self._value
