"""The answer cache: which requests it serves, how long it keeps answers, and how much."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from gateway_kit.config.base import Mode, OnError, _Config

__all__ = ["CacheConfig", "SemanticCacheConfig"]


class SemanticCacheConfig(_Config):
    """The semantic cache: a request whose final user message means what an earlier one's did
    (everything else equal) gets that one's answer. Opt-in: per model here, per workspace
    through the API (``PATCH .../cache {"semantic": true}``)."""

    #: Models whose requests are looked up by meaning for every workspace (``"*"``: every
    #: chat model).
    models: list[str] = Field(default_factory=list)
    #: The cosine similarity at or above which a cached prompt may answer (then the lexical
    #: guard decides). Chosen on the labelled pairs of ``bench cache_pairs``.
    threshold: float = Field(default=0.93, gt=0.0, le=1.0)
    #: The lexical guard: ``strict`` serves a match only when both prompts hold the same
    #: content words (rephrased in function words, order of phrases, case, punctuation,
    #: plurals and contractions); ``lenient`` also when words were replaced (synonyms), leaving
    #: those to the embedder: more hits, and some wrong ones (see the README's figures).
    guard: Literal["strict", "lenient"] = "strict"
    #: ``local``: WordLlama, offline (the ``semantic`` extra). Or the name of one of this
    #: gateway's embedding models (its ``/v1/embeddings``).
    embedder: str = "local"
    #: Prompts remembered per partition (a model, system prompt, history and parameters).
    per_partition: int = Field(default=1000, ge=1, le=100_000)


class CacheConfig(_Config):
    """The exact cache (``layers.cache``). On by default for the requests it may serve:
    ``n = 1`` and a ``temperature`` given explicitly at or below ``max_temperature``."""

    #: ``enforce`` serves hits; ``monitor`` looks up and stores but serves every request from
    #: upstream (``x-gateway-cache-monitor`` says what would have hit); ``off``.
    mode: Mode = Mode.ENFORCE
    #: The shared store's storage failing on a lookup (the in-process store cannot): ``open``
    #: serves from upstream (``x-gateway-cache: unchecked``), ``closed`` answers 503.
    on_error: OnError = OnError.OPEN
    #: The highest temperature a request may ask for and be cached. An omitted temperature
    #: is the provider's default (1 at OpenAI), not 0: such a request is not cached.
    max_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    #: How long an answer is served, in seconds.
    ttl_s: float = Field(default=3600.0, gt=0, le=30 * 86_400)
    #: Bounds of the store: entries (per scope on the shared store) and bytes (the in-process
    #: one's; Redis's own ``maxmemory`` bounds the shared one), the least recently used answer
    #: going first.
    max_entries: int = Field(default=10_000, ge=1, le=10_000_000)
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    #: An answer larger than this is not stored.
    max_entry_bytes: int = Field(default=1024 * 1024, ge=256)
    #: Where answers live: ``local`` (each gateway process its own, bounded by the sizes
    #: below), ``storage`` (the gateway's storage, shared by every instance on it), ``auto``
    #: (``storage`` on Redis, else ``local``).
    store: Literal["auto", "local", "storage"] = "auto"
    #: ``workspace``: a workspace's requests hit its own answers only. ``shared``: every
    #: workspace of the gateway shares answers (for one team's several workspaces; never
    #: across tenants who must not see each other's answers).
    scope: Literal["workspace", "shared"] = "workspace"
    semantic: SemanticCacheConfig = Field(default_factory=SemanticCacheConfig)
    #: The key of the cache's keyed hashes. Unset: one is drawn at random once and kept in
    #: the storage, shared by every gateway on it.
    secret: SecretStr | None = None
