"""The body's ``cache`` field: gateway-kit's own, read by the cache layer and never sent
upstream (the inference endpoints drop it, embeddings' too: LiteLLM's clients send it there),
whether the cache is on or not.

``false``, or an object with LiteLLM's per-request cache controls: ``no-cache`` / ``no-store``
(``no_cache``) opt out; ``s-maxage`` bounds the age of the answer accepted, ``ttl`` the time
the answer is kept, ``namespace`` shares answers only within one. ``check_cache_field`` is part
of the chat request's validation: anything else is a client's mistake, answered with a 400.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gateway_kit.pipeline.verdicts import Refusal

__all__ = ["FIELD", "MEMBERS", "OPT_OUTS", "check_cache_field", "without_cache_field"]

FIELD = "cache"
#: The opt-outs (LiteLLM's, and the spelling some clients use).
OPT_OUTS = ("no-cache", "no-store", "no_cache")
#: Every member the object may have.
MEMBERS = (*OPT_OUTS, "s-maxage", "ttl", "namespace")
#: The longest namespace (it is hashed into the key: any text, within reason).
_MAX_NAMESPACE = 256


def check_cache_field(payload: Mapping[str, Any]) -> Refusal | None:
    """The body's ``cache`` field, when it is a client's mistake: neither a boolean nor an
    object, a member this gateway does not know (it would be ignored silently), or a member
    of the wrong type. A member given as ``null`` is absent."""
    value = payload.get(FIELD)
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, Mapping):
        return _invalid(
            "cache", "'cache' must be a boolean or an object such as {\"no-store\": true}."
        )
    unknown = [name for name in value if name not in MEMBERS]
    if unknown:
        return Refusal(
            400,
            f"Unknown member(s) of 'cache': {', '.join(map(str, unknown))}. Allowed: "
            f"{', '.join(MEMBERS)}.",
            code="unknown_parameter",
            param=f"cache.{unknown[0]}",
        )
    for name in OPT_OUTS:
        if value.get(name) is not None and not isinstance(value[name], bool):
            return _invalid(f"cache.{name}", f"'cache.{name}' must be a boolean.")
    age, ttl, namespace = value.get("s-maxage"), value.get("ttl"), value.get("namespace")
    if age is not None and not (_seconds(age) and age >= 0):
        return _invalid(
            "cache.s-maxage", "'cache.s-maxage' must be a number of seconds, 0 or more."
        )
    if ttl is not None and not (_seconds(ttl) and ttl > 0):
        return _invalid("cache.ttl", "'cache.ttl' must be a number of seconds above 0.")
    if namespace is not None and not (
        isinstance(namespace, str) and 0 < len(namespace) <= _MAX_NAMESPACE
    ):
        return _invalid(
            "cache.namespace",
            f"'cache.namespace' must be a string of 1 to {_MAX_NAMESPACE} characters.",
        )
    return None


def _invalid(param: str, message: str) -> Refusal:
    return Refusal(400, message, code="invalid_type", param=param)


def without_cache_field(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as the upstream gets it: without the ``cache`` field (itself when it has
    none)."""
    if FIELD not in payload:
        return payload
    return {k: v for k, v in payload.items() if k != FIELD}


def _seconds(value: Any) -> bool:
    """A number of seconds: an int (of any size, not a bool) or a finite float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)
