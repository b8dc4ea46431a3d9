"""The dashboard: a page served by the gateway itself, at ``/dashboard``.

Plain HTML, CSS and JavaScript shipped in the package (``static/``): no build step, nothing
fetched from a CDN. The page signs in with a workspace's API key or the operator's token, kept
in the browser tab's session storage, and reads the gateway's own API with it (``/v1/me``,
``.../budget``, ``.../usage``, ``.../requests``, ``.../webhooks`` and their delivery logs,
``.../events``; the operator's ``/api/v1/admin/workspaces``): what a key may not read says so
in place. Nothing is rendered on the server, so no key or value ever lands in the HTML.

Every answer carries a strict ``Content-Security-Policy`` (this origin's scripts and styles
only, no inline script, no framing) and ``Cache-Control: no-store`` for the page.
"""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gateway_kit._asgi import ASGIApp, Message, Receive, Scope, Send

__all__ = ["STATIC", "dashboard_routes"]

STATIC = Path(__file__).parent / "static"

_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class _Secured:
    """Adds the page's security headers to whatever the app inside answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_HEADERS]
            await send(message)

        await self.app(scope, receive, secured)


async def _page(request: Request) -> Response:
    return FileResponse(
        STATIC / "index.html", media_type="text/html", headers={"cache-control": "no-store"}
    )


def dashboard_routes() -> list[Route | Mount]:
    """``GET /dashboard`` (the page) and ``/dashboard/static/...`` (its assets)."""
    return [
        Route("/dashboard", _page, methods=["GET"], middleware=[Middleware(_Secured)]),
        Mount("/dashboard/static", app=_Secured(StaticFiles(directory=STATIC)), name="dashboard"),
    ]
