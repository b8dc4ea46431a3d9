"""Test helpers shipped with gateway-kit, for this project and for code that embeds it.

- ``ASGIRecorder``: drive an ASGI app with raw messages and assert streaming behaviour.
- ``run_server``: a real uvicorn server on a free loopback port (needs the ``server`` extra).
"""

from __future__ import annotations

from gateway_kit.testing.asgi import ASGIRecorder, RecordedMessage, RecordedResponse
from gateway_kit.testing.server import run_server

__all__ = ["ASGIRecorder", "RecordedMessage", "RecordedResponse", "run_server"]
