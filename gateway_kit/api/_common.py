"""What the management endpoints share: JSON bodies in and out, errors in the OpenAI shape."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway_kit._asgi import error_body
from gateway_kit._text import CONTROL
from gateway_kit.accounts.keys import Principal
from gateway_kit.cost.money import parse_usd
from gateway_kit.exceptions import InvalidRequestError
from gateway_kit.pipeline.body import InvalidJSON, encoding_refused, parse_json
from gateway_kit.pipeline.context import get_context
from gateway_kit.storage.lock import held

if TYPE_CHECKING:
    from gateway_kit.gateway import Gateway

P = ParamSpec("P")
T = TypeVar("T")

#: Management bodies are small; anything bigger is a mistake or an attack.
MAX_BODY_BYTES = 64 * 1024

_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
}


def one_change_at_a_time(
    what: str,
) -> Callable[
    [Callable[Concatenate[Gateway, str, P], Awaitable[T]]],
    Callable[Concatenate[Gateway, str, P], Awaitable[T]],
]:
    """For a change of a workspace's ``what`` that reads its settings, merges a body into
    them and saves them: two at once (one process or two) would each save over the other's
    entries, so they go one at a time (``storage.lock``)."""

    def wrap(
        change: Callable[Concatenate[Gateway, str, P], Awaitable[T]],
    ) -> Callable[Concatenate[Gateway, str, P], Awaitable[T]]:
        async def locked(
            gateway: Gateway, workspace_id: str, /, *args: P.args, **kwargs: P.kwargs
        ) -> T:
            async with held(gateway.storage, f"{workspace_id}:lock:{what}"):
                return await change(gateway, workspace_id, *args, **kwargs)

        return locked

    return wrap


class ApiError(Exception):
    """Raised inside an endpoint to answer with an OpenAI-shaped error."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param

    def response(self) -> Response:
        body = error_body(
            str(self),
            type=_ERROR_TYPES.get(self.status, "invalid_request_error"),
            code=self.code,
            param=self.param,
        )
        return Response(body, self.status, media_type="application/json")


def json_response(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status, media_type="application/json")


def principal_of(request: Request) -> Principal:
    principal = get_context(request.scope).principal
    if principal is None:  # the app always mounts these behind AuthMiddleware
        raise RuntimeError("management endpoint reached without an authenticated principal")
    return principal


async def json_body(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The request's JSON object, or an ``ApiError`` (400/413/415) saying what is wrong.

    Read by ``parse_json``, as the inference routes read theirs: UTF-8 only, and no ``NaN``,
    ``Infinity``, lone surrogates or nesting past ``MAX_JSON_DEPTH`` reach an endpoint.
    """
    content_type = request.headers.get("content-type", "")
    refused = encoding_refused(request.headers.get("content-encoding"))
    if refused is not None:
        raise ApiError(415, refused, code="unsupported_media_type")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"Body exceeds {MAX_BODY_BYTES} bytes.", code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(
                    413, f"Body exceeds {MAX_BODY_BYTES} bytes.", code="request_too_large"
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "The client disconnected.", code="client_disconnected") from None
    raw = b"".join(chunks)
    if not raw.strip() and optional:
        return {}
    if content_type and "json" not in content_type.split(";")[0].lower():
        raise ApiError(415, "Content-Type must be application/json.", code="unsupported_media_type")
    try:
        body = parse_json(raw)
    except InvalidJSON as exc:
        raise ApiError(
            400, f"The body cannot be read as JSON: {exc}.", code="invalid_json", param=exc.param
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_type")
    return body


def check_fields(body: dict[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            f"Unknown field(s): {', '.join(unknown)}. Allowed: {', '.join(allowed)}.",
            code="unknown_parameter",
            param=unknown[0],
        )


def string_field(
    body: dict[str, Any],
    name: str,
    *,
    default: str | None = None,
    max_length: int = 200,
    allow_empty: bool = False,
) -> str:
    """A one-line text field (a name, a URL, an e-mail address, a reference): a string of at
    most ``max_length`` characters without control characters, stripped of surrounding spaces;
    non-empty unless ``allow_empty``."""
    value = body.get(name, default)
    if not isinstance(value, str) or not (allow_empty or value.strip()):
        what = "a string" if allow_empty else "a non-empty string"
        raise ApiError(400, f"'{name}' must be {what}.", code="invalid_type", param=name)
    control = CONTROL.search(value)
    if control is not None:
        raise ApiError(
            400,
            f"'{name}' must not contain control characters (found U+{ord(control.group()):04X} "
            f"at position {control.start()}).",
            code="invalid_value",
            param=name,
        )
    if len(value) > max_length:
        raise ApiError(
            400,
            f"'{name}' is longer than {max_length} characters.",
            code="invalid_value",
            param=name,
        )
    return value.strip()


def number_field(
    body: dict[str, Any], name: str, *, default: float, low: float, high: float
) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ApiError(
            400,
            f"'{name}' must be a number between {low:g} and {high:g}.",
            code="invalid_value",
            param=name,
        )
    return float(value)


def micro_usd_field(value: Any, name: str, *, high: int, positive: bool = False) -> int:
    """``parse_usd`` for a field of a JSON body: a 400 naming the field when it is not an
    amount."""
    try:
        return parse_usd(value, name, high=high, positive=positive)
    except InvalidRequestError as exc:
        raise ApiError(400, str(exc), code="invalid_value", param=name) from None


def limit_param(text: str, high: int) -> int:
    """A ``limit`` query parameter: an integer from 1 to ``high``, else a 400 naming it."""
    # ASCII digits only, and few of them: "²" is a digit to str.isdigit but not to int(), and
    # int() refuses texts of thousands of digits.
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or not 1 <= int(text) <= high:
        raise ApiError(
            400,
            f"'limit' must be an integer from 1 to {high}.",
            code="invalid_value",
            param="limit",
        )
    return int(text)


def time_param(value: object, name: str) -> datetime:
    """An ISO 8601 time with a zone (``Z`` or an offset), else a 400 naming ``name``."""
    try:
        if not isinstance(value, str):
            raise ValueError
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            raise ValueError
    except ValueError:
        raise ApiError(
            400,
            f"'{name}' must be an ISO 8601 time with a zone, e.g. 2026-11-22T00:00:00Z.",
            code="invalid_value",
            param=name,
        ) from None
    return moment
