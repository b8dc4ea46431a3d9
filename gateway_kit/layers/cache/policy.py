"""``CachePolicy``: whether a request may be served from the cache, and its key. No ASGI here.

Eligible: ``n`` absent or 1; a ``temperature`` given explicitly at or below the configured
maximum (an omitted temperature is the provider's default, 1 at OpenAI, not 0); no
``Cache-Control: no-cache`` or ``no-store`` request header; no opt-out in the body (``"cache":
false``, or LiteLLM's ``"cache": {"no-cache": true}`` / ``{"no-store": true}``).

A request may also say, as HTTP and LiteLLM clients do (``CacheControls``): how old an answer
it accepts (``Cache-Control: max-age=N``, or ``"cache": {"s-maxage": N}``), how long its own
answer is kept (``"cache": {"ttl": N}``, at most the configured TTL), and a namespace
(``"cache": {"namespace": "..."}``), part of the key: answers are shared only within one.

The key is a keyed hash (HMAC-SHA256 under the deployment's secret) of the canonical request:
its JSON with keys sorted and no whitespace, the model replaced by the resolved one, and the
fields that do not change the answer left out (``stream``, ``stream_options``, ``user``,
``metadata``, ``store``, ``cache``). Everything else is in it: every message, ``tools``,
``tool_choice``, ``response_format``, every sampling parameter, and any field this policy does
not know (a field it cannot judge may change the answer). The request it hashes is the masked
one when PII masking is on, so keys hold no raw value either.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_kit.chat.cache_field import OPT_OUTS
from gateway_kit.config.cache import CacheConfig
from gateway_kit.pipeline.verdicts import Verdict

__all__ = ["VOLATILE_FIELDS", "CacheControls", "CachePolicy", "CacheVerdict"]

#: Request fields that do not change the answer: left out of the key.
VOLATILE_FIELDS = frozenset({"stream", "stream_options", "user", "metadata", "store", "cache"})


@dataclass(frozen=True, slots=True)
class CacheControls:
    """What a request asks of the cache besides being served from it: the oldest answer it
    accepts (``max_age``, seconds), how long its answer is kept (``ttl``, seconds, within the
    configured TTL), and the namespace its answers are shared in."""

    max_age: float | None = None
    ttl: float | None = None
    namespace: str | None = None

    def accepts(self, stored_at: float | None, now: float) -> bool:
        """Whether an answer kept at ``stored_at`` is younger than the bound (so ``max-age=0``
        asks for a fresh answer, even within the clock's resolution; one kept before answers
        said when, ``None``, is not accepted under a bound)."""
        if self.max_age is None:
            return True
        return stored_at is not None and now - stored_at < self.max_age


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheVerdict(Verdict):
    """``hit`` (served from the cache: the same request), ``semantic`` (served from the cache:
    a request that meant the same, ``similarity``), ``miss`` (served from upstream, stored if
    complete), ``bypass`` (not eligible: ``reason`` says why)."""

    reason: str | None = None
    #: Monitor mode: whether the request would have been served from the cache.
    would_hit: bool = False
    #: A semantic hit's similarity.
    similarity: float | None = None
    #: The best similarity a semantic lookup found (served or not), for the histogram.
    best: float | None = None

    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.reason is not None:
            details["reason"] = self.reason
        if self.similarity is not None:
            details["similarity"] = round(self.similarity, 4)
        if self.would_hit:
            details["would_hit"] = True
        return details


class CachePolicy:
    def __init__(self, config: CacheConfig) -> None:
        self.config = config

    def bypass_reason(self, payload: Mapping[str, Any], cache_control: str) -> str | None:
        """Why ``payload`` may not be served from the cache, ``None`` when it may."""
        if cache_control and _directives(cache_control).keys() & {"no-cache", "no-store"}:
            return "cache-control"
        if opted_out(payload.get("cache")):
            return "opt-out"
        n = payload.get("n")
        if n is not None and n != 1:
            return "n"
        if payload.get("logprobs") is True or payload.get("top_logprobs") is not None:
            return "logprobs"  # a kept answer has no token logprobs to give
        modalities = payload.get("modalities")
        if isinstance(modalities, list) and "audio" in modalities:
            return "audio"  # its answer names an upstream audio object that expires
        temperature = payload.get("temperature")
        if temperature is None:
            return "temperature-unset"
        if not _number(temperature) or temperature > self.config.max_temperature:
            return "temperature"
        return None

    def controls(self, payload: Mapping[str, Any], cache_control: str) -> CacheControls:
        """The request's ``CacheControls``, from its ``cache`` object (checked with the request:
        ``chat.cache_field``) and its ``Cache-Control`` header (a ``max-age`` that is not a
        number of seconds is ignored, as HTTP caches do); the stricter age bound wins."""
        ages: list[float] = []
        if cache_control:
            age = _directives(cache_control).get("max-age", "").strip('"')
            if age.isascii() and age.isdigit():
                # Past any bound (and past what int() reads, 4,300 digits): no bound at all.
                ages.append(min(int(age), _FOREVER) if len(age) <= 13 else _FOREVER)
        ttl = namespace = None
        value = payload.get("cache")
        if isinstance(value, Mapping):
            if value.get("s-maxage") is not None:
                ages.append(min(value["s-maxage"], _FOREVER))
            if value.get("ttl") is not None:
                ttl = float(min(value["ttl"], self.config.ttl_s))
            namespace = value.get("namespace")
        if not ages and ttl is None and namespace is None:
            return _NO_CONTROLS
        return CacheControls(float(min(ages)) if ages else None, ttl, namespace)

    def key(
        self,
        payload: Mapping[str, Any],
        model: str,
        secret: bytes,
        values: Mapping[str, str] | None = None,
        namespace: str | None = None,
    ) -> str:
        """The request's cache key within its scope (32 hex digits). ``values``: the masked
        request's placeholders and the values they stand for, when the model reads the values
        (PII masking's ``cache`` scope): then only a request with the same values has the key
        (its answer may say more of them than the values themselves). ``namespace``: the
        request's own (``CacheControls``); only requests of the same one share a key."""
        canonical = {k: v for k, v in payload.items() if k not in VOLATILE_FIELDS}
        canonical["model"] = model
        return _keyed(canonical, secret, values, namespace)

    def semantic_parts(
        self,
        payload: Mapping[str, Any],
        model: str,
        embedder: str,
        secret: bytes,
        values: Mapping[str, str] | None = None,
        namespace: str | None = None,
    ) -> tuple[str, str] | None:
        """The request's semantic partition and the text looked up by meaning: its final
        message, when that is a user's text; ``None`` otherwise (a tool result, an image).

        The partition is a keyed hash of everything else: every other message, the final
        message's role and name, the model, tools, parameters, the embedder's id, and
        ``values`` and ``namespace`` as for ``key``."""
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        last = messages[-1]
        if not isinstance(last, dict) or last.get("role") != "user":
            return None
        text = _text_of(last.get("content"))
        if not text or not text.strip():
            return None
        canonical = {k: v for k, v in payload.items() if k not in VOLATILE_FIELDS}
        rest = {k: v for k, v in last.items() if k != "content"}
        canonical.update(model=model, messages=[*messages[:-1], rest], embedder=embedder)
        return _keyed(canonical, secret, values, namespace), text


_NO_CONTROLS = CacheControls()
#: An age bound past any answer's (a JSON number may be too large for a float).
_FOREVER = 10**12


def _directives(cache_control: str) -> dict[str, str]:
    """A ``Cache-Control`` header's directives, names in lower case: ``{name: argument}``."""
    directives: dict[str, str] = {}
    for directive in cache_control.split(","):
        name, _, argument = directive.partition("=")
        directives.setdefault(name.strip().lower(), argument.strip())
    return directives


def opted_out(value: Any) -> bool:
    """Whether the body's ``cache`` field opts the request out."""
    if value is False:
        return True
    if isinstance(value, Mapping):
        return any(value.get(name) is True for name in OPT_OUTS)
    return False


def _keyed(
    canonical: dict[str, Any],
    secret: bytes,
    values: Mapping[str, str] | None = None,
    namespace: str | None = None,
) -> str:
    # With values or a namespace, a list: no request's own fields can spell the same text.
    keyed: Any = canonical
    if namespace is not None:
        keyed = [canonical, sorted(values.items()) if values else [], namespace]
    elif values:
        keyed = [canonical, sorted(values.items())]
    text = json.dumps(keyed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.digest(secret, text.encode(), "sha256").hex()[:32]


def _text_of(content: Any) -> str | None:
    """A message's text: a string, or text parts only (anything else: ``None``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
