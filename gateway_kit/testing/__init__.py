"""Test helpers shipped with gateway-kit, for this project and for code that embeds it.

- ``ASGIRecorder``: drive an ASGI app with raw messages and assert streaming behaviour.
- ``run_server``: a real uvicorn server on a free loopback port (needs the ``server`` extra).
- ``FakeClock``: time a test moves by hand (``advance``), for every ``clock=`` (storage, the
  ``Gateway``, the webhook worker's waits).
- ``StorageConformance``: the storage backend contract as a pytest suite
  (``gateway_kit.testing.storage``; imported on first use, as it needs pytest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway_kit.testing.asgi import ASGIRecorder, RecordedMessage, RecordedResponse
from gateway_kit.testing.clock import FakeClock
from gateway_kit.testing.server import run_server

if TYPE_CHECKING:
    from gateway_kit.testing.storage import StorageConformance

__all__ = [
    "ASGIRecorder",
    "FakeClock",
    "RecordedMessage",
    "RecordedResponse",
    "StorageConformance",
    "run_server",
]


def __getattr__(name: str) -> object:
    if name == "StorageConformance":
        from gateway_kit.testing.storage import StorageConformance

        return StorageConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
