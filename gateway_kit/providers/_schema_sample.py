"""``sample``: a deterministic value that validates against a JSON schema, for the mock provider.

It covers what structured-output and tool schemas use in practice (what pydantic's
``model_json_schema()`` and the OpenAI SDK's strict schemas produce): objects (``required``,
``additionalProperties``, ``minProperties``), arrays (``items``, ``prefixItems``, ``minItems``,
``maxItems``, ``uniqueItems``), ``enum``, ``const``, string formats and lengths, numbers and
integers with bounds and ``multipleOf``, nullable types, ``anyOf``/``oneOf`` (the first branch),
``allOf`` (merged) and local ``$ref`` (``#/$defs/...``, ``#/definitions/...``). ``pattern`` is
not honoured. ``variant`` makes the sample of one schema differ from call to call where the
schema leaves room (a string suffix, the next enum value), so the ``n`` choices of a mock
answer are distinct.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard

__all__ = ["sample"]

#: Below this depth, arrays get one item and optional properties are filled in; deeper, only
#: what the schema requires, so recursive models (a tree of nodes) end.
_SHALLOW_DEPTH = 8
_MAX_DEPTH = 64
#: Caps on what a schema can demand, so a hostile one cannot exhaust memory (beyond: invalid).
_MAX_ITEMS = 100
_MAX_LENGTH = 10_000
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def sample(schema: Any, *, variant: int = 0) -> Any:
    """A deterministic value valid against ``schema`` (best effort; see the module docstring)."""
    return _Sampler(schema).sample(schema, variant, 0)


class _Sampler:
    def __init__(self, root: Any) -> None:
        self._root = root

    def sample(self, schema: Any, variant: int, depth: int) -> Any:
        if schema is True or not isinstance(schema, dict):
            return "mock"
        schema = self._resolve(schema)
        if depth > _MAX_DEPTH:
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][variant % len(schema["enum"])]
        if depth >= _SHALLOW_DEPTH and _nullable(schema):
            return None  # deep down, end a recursive structure where the schema allows it
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                return self.sample(self._branch(branches, depth), variant, depth + 1)
        kind = _kind(schema)
        if kind == "object":
            return self._object(schema, variant, depth)
        if kind == "array":
            return self._array(schema, variant, depth)
        if kind == "string":
            return _string(schema, variant)
        if kind in ("integer", "number"):
            return _number(schema, variant, integer=kind == "integer")
        if kind == "boolean":
            return variant % 2 == 0
        if kind == "null":
            return None
        return "mock"

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` with its local ``$ref`` and ``allOf`` merged in (its own keys win)."""
        for _ in range(_MAX_DEPTH):
            ref = schema.get("$ref")
            parts = schema.get("allOf")
            if not isinstance(ref, str) and not isinstance(parts, list):
                return schema
            merged = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
            for part in ([self._lookup(ref)] if isinstance(ref, str) else []) + (parts or []):
                if isinstance(part, dict):
                    merged = _merge(merged, part)
            schema = merged
        return schema

    def _lookup(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return {}  # a remote reference: nothing to go on
        target: Any = self._root
        for token in ref[1:].lstrip("/").split("/") if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict):
                target = target.get(token, {})
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                return {}
        return target

    def _branch(self, branches: list[Any], depth: int) -> Any:
        """The first branch; deep down, a ``null`` branch if there is one (recursion ends)."""
        if depth >= _SHALLOW_DEPTH:
            for branch in branches:
                if isinstance(branch, dict) and self._resolve(branch).get("type") == "null":
                    return branch
        return branches[0]

    def _object(self, schema: dict[str, Any], variant: int, depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        names = required or ([] if depth >= _SHALLOW_DEPTH else list(properties))
        extra = schema.get("additionalProperties")
        result: dict[str, Any] = {}
        for name in names:
            sub = properties.get(name, extra if isinstance(extra, dict) else {})
            result[name] = self.sample(sub, variant, depth + 1)
        minimum = schema.get("minProperties")
        if isinstance(minimum, int) and extra is not False:
            minimum = min(minimum, _MAX_ITEMS)
            extra_schema = extra if isinstance(extra, dict) else {}
            extras = (f"key{i}" for i in range(1, minimum + 1) if f"key{i}" not in result)
            for name in extras:
                if len(result) >= minimum:
                    break
                result[name] = self.sample(extra_schema, variant, depth + 1)
        return result

    def _array(self, schema: dict[str, Any], variant: int, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items")
        if isinstance(items, list):  # draft 4-7 tuples
            prefix, items = items, schema.get("additionalItems")
        low = schema.get("minItems")
        low = min(low, _MAX_ITEMS) if isinstance(low, int) and low > 0 else 0
        high = schema.get("maxItems")
        count = max(low, len(prefix))
        if isinstance(items, dict) and depth < _SHALLOW_DEPTH and count == 0:
            count = 1
        if isinstance(high, int):
            count = min(count, max(high, low))
        result = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items if isinstance(items, dict) else {}
            # Distinct variants, so ``uniqueItems`` holds where the item schema allows it.
            result.append(self.sample(sub, variant + i, depth + 1))
        return result


def _kind(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        named = [k for k in kind if isinstance(k, str)]
        return next((k for k in named if k != "null"), "null" if named else None)
    if isinstance(kind, str):
        return kind
    # No type: go by the keywords.
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        return "object"
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(k in schema for k in ("format", "minLength", "maxLength", "pattern")):
        return "string"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return "number"
    return None


def _nullable(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return schema.get("nullable") is True or (isinstance(kind, list) and "null" in kind)


def _merge(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    merged = {**part, **base}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(part.get(key), dict) and isinstance(base.get(key), dict):
            merged[key] = {**part[key], **base[key]}
    if isinstance(part.get("required"), list) and isinstance(base.get("required"), list):
        merged["required"] = list(dict.fromkeys([*part["required"], *base["required"]]))
    return merged


def _string(schema: dict[str, Any], variant: int) -> str:
    at = _EPOCH + timedelta(days=variant)
    formats = {
        "date-time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "date": at.strftime("%Y-%m-%d"),
        "time": "12:00:00Z",
        "duration": f"P{variant + 1}D",
        "email": f"mock{variant or ''}@example.com",
        "idn-email": f"mock{variant or ''}@example.com",
        "uri": f"https://example.com/mock{variant or ''}",
        "iri": f"https://example.com/mock{variant or ''}",
        "url": f"https://example.com/mock{variant or ''}",
        "uri-reference": f"/mock{variant or ''}",
        "iri-reference": f"/mock{variant or ''}",
        "uuid": f"{variant:08x}-0000-4000-8000-000000000000",
        "hostname": f"mock{variant or ''}.example.com",
        "idn-hostname": f"mock{variant or ''}.example.com",
        "ipv4": f"192.0.2.{variant % 256}",
        "ipv6": f"2001:db8::{variant % 65536:x}",
        "json-pointer": f"/mock{variant or ''}",
        "regex": "^mock$",
    }
    text = formats.get(str(schema.get("format")))
    if text is not None:
        return text
    text = "mock" if variant == 0 else f"mock ({variant + 1})"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        low = min(low, _MAX_LENGTH)
        text = (text + " mock" * (low // 5 + 1))[:low]
    if isinstance(high, int) and len(text) > high:
        text = text[: max(high, 0)]
    return text


def _number(schema: dict[str, Any], variant: int, *, integer: bool) -> int | float:
    low, high = schema.get("minimum"), schema.get("maximum")
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    low_open = high_open = False
    # Draft 4 spells exclusivity as a boolean beside minimum/maximum; later drafts as a bound.
    if isinstance(ex_low, bool):
        low_open = ex_low
    elif _is_number(ex_low) and (not _is_number(low) or ex_low >= low):
        low, low_open = ex_low, True
    if isinstance(ex_high, bool):
        high_open = ex_high
    elif _is_number(ex_high) and (not _is_number(high) or ex_high <= high):
        high, high_open = ex_high, True
    low = low if _is_number(low) else None
    high = high if _is_number(high) else None
    step = schema.get("multipleOf")
    step = step if _is_number(step) and step > 0 else None

    def fits(value: float) -> bool:
        if low is not None and (value < low or (low_open and value == low)):
            return False
        if high is not None and (value > high or (high_open and value == high)):
            return False
        return step is None or math.isclose(value / step, round(value / step), abs_tol=1e-9)

    candidates: list[float] = [1 + variant]
    if low is not None:
        candidates += [low + variant, low + 1 + variant, low]
    if high is not None:
        candidates += [high - variant, high - 1 - variant, high]
    if low is not None and high is not None:
        candidates.append((low + high) / 2)
    if step is not None:
        multiples = [c / step for c in candidates if math.isfinite(c / step)]
        candidates = [step * k for m in multiples for k in (math.ceil(m), math.floor(m))] or [step]
    if integer:
        candidates = [float(k) for c in candidates for k in (math.ceil(c), math.floor(c))]
    value = next((c for c in candidates if fits(c)), candidates[0])
    return int(value) if integer else float(value)


def _is_number(value: Any) -> TypeGuard[int | float]:
    # Bounds past 1e300 (infinities, NaN, huge integers) are ignored: floats cannot hold them.
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300
