"""Test helpers shipped with gateway-kit, for this project and for code that embeds it.

- ``ASGIRecorder``: drive an ASGI app with raw messages and assert streaming behaviour.
"""

from __future__ import annotations

from gateway_kit.testing.asgi import ASGIRecorder, RecordedMessage, RecordedResponse

__all__ = ["ASGIRecorder", "RecordedMessage", "RecordedResponse"]
