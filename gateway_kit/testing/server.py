"""``run_server``: a real uvicorn server on a free loopback port, for end-to-end tests.

    with run_server(create_app(config)) as base_url:
        httpx.get(f"{base_url}/healthz")

The server runs in a background thread with its own event loop (lifespan included) and stops
when the block ends. Needs the ``server`` extra.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway_kit._asgi import ASGIApp


@contextmanager
def run_server(
    app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, **options: Any
) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields the base URL (``http://host:port``)."""
    import uvicorn

    ready = threading.Event()

    class _Server(uvicorn.Server):
        # uvicorn leaves signal handling alone outside the main thread.
        async def startup(self, sockets: Any = None) -> None:
            try:
                await super().startup(sockets)
            except SystemExit:  # uvicorn >= 0.54 exits when the app's startup fails
                self.should_exit = True
            ready.set()

    options = {"log_level": "warning", "lifespan": "on", **options}
    server = _Server(uvicorn.Config(app, host=host, port=port, **options))
    thread = threading.Thread(target=server.run, name="gateway-kit-test-server", daemon=True)
    thread.start()
    while not ready.wait(0.05):
        if not thread.is_alive():
            raise RuntimeError("the test server failed to start (see its log above)")
    if server.should_exit or not server.servers:
        thread.join(10)
        raise RuntimeError("the test server failed to start (see its log above)")
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(30)
