"""What a layer decides about a request: ``Verdict``, and the ``Refusal`` it may answer with.

Each layer's policy is a plain object returning a ``<Concern>Verdict`` (a subclass of
``Verdict``); the middleware records it on the request context (``ctx.verdicts[concern]``), so
later layers, the request log and experiments can read every layer's decision. A verdict that
stops the request carries a ``Refusal``: the OpenAI-shaped error to answer with. In ``monitor``
mode a policy computes the same verdict but never refuses (``action`` says what it would have
done, e.g. ``would-block``).

When storage (or a detector) fails, ``unavailable`` applies the layer's ``on_error``: ``closed``
refuses with 503 ``<concern>_unavailable``, ``open`` lets the request through unchecked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from gateway_kit._asgi.errors import send_error
from gateway_kit._asgi.types import Header, Send
from gateway_kit.config.base import OnError

__all__ = ["Refusal", "Verdict", "unavailable"]

logger = logging.getLogger("gateway_kit.pipeline")


@dataclass(frozen=True, slots=True)
class Refusal:
    """An OpenAI-shaped error that ends a request before it reaches upstream."""

    status: int
    message: str
    _: KW_ONLY
    code: str
    type: str = "invalid_request_error"
    param: str | None = None
    #: Headers of this answer only (e.g. ``Retry-After``); the context's headers come too.
    headers: Sequence[Header] = ()

    async def send(self, send: Send) -> None:
        await send_error(
            send,
            self.status,
            self.message,
            type=self.type,
            code=self.code,
            param=self.param,
            headers=self.headers,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One layer's decision about one request.

    ``action`` names it in a word the request log and headers can show (``pass``, ``warn``,
    ``downgrade``, ``block``, ``would-block``, ``unchecked``...); ``refusal`` is set when the
    request must stop here.
    """

    action: str = "pass"
    refusal: Refusal | None = None

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    def details(self) -> dict[str, Any]:
        """What the request log keeps of the decision besides ``action``: figures and names,
        never a value of the request's."""
        return {}


def unavailable(concern: str, on_error: OnError, error: Exception) -> Refusal | None:
    """The answer when ``concern`` cannot decide because storage failed: 503 when closed,
    ``None`` (serve unchecked) when open. Logged either way."""
    logger.error("%s unavailable (on_error=%s): %s", concern, on_error.value, error)
    if on_error is OnError.OPEN:
        return None
    return Refusal(
        503,
        f"The {concern} check cannot be made right now; try again shortly.",
        code=f"{concern}_unavailable",
        type="api_error",
    )
