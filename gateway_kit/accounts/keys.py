"""API keys: created shown once, stored as a SHA-256 hash, rotated and revoked.

A key is ``gk_`` + 43 random URL-safe characters (256 bits). Its record (``<ws>:keys``, one
field per ``kid_...`` key id) holds the visible prefix and its state, never the secret. Each
live secret hash has its own index entry, ``gk:apikey:<sha256>``, so that authenticating is one
storage read; a rotated secret's entry simply expires after the grace period, by the store's
own clock. Keys are high-entropy, so a plain SHA-256 (not a slow password hash) is the
standard choice: it is what GitHub and Stripe-style tokens use.

A verified key is cached in-process (by digest) and stays cached: revoking or rotating a key
publishes the digests that stop working to the change feed (``accounts.changes``), and every
process drops them from its cache when it polls, within ``auth.cache_ttl_s``. A secret in its
grace period is never cached: its lapse is the store's to enforce, to the second.

Each key has scopes (``accounts.scopes``), kept in its record and in its index entry, so the
principal that authenticating returns knows what the key may do. A key made before scopes
existed has none recorded: it gets ``unscoped`` (the ``auth.unscoped_keys`` setting).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import string
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.accounts.periods import iso_utc
from gateway_kit.accounts.scopes import ROLES, KeyScope, ordered, role_of
from gateway_kit.events.bus import EventBus
from gateway_kit.events.models import Event, KeyRotatedData
from gateway_kit.exceptions import NotFoundError
from gateway_kit.storage import Storage
from gateway_kit.storage.lock import held

KEY_PATTERN = re.compile(r"gk_[A-Za-z0-9_-]{43}")
KEY_ID = re.compile(r"kid_[a-z0-9]{1,64}")
_PREFIX_LENGTH = 12
_ID_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(slots=True)
class Principal:
    """Who is calling: a workspace and one of its keys (set by the Auth layer), and what the
    key may do."""

    workspace_id: str
    key_id: str
    scopes: frozenset[KeyScope]
    #: Authenticated by a secret in a rotation's grace period (being retired).
    retiring: bool = False

    def allows(self, scope: KeyScope) -> bool:
        return scope in self.scopes


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key's record. ``prefix`` is what people see (``gk_Ab3dE5fG7h``); never the secret."""

    key_id: str
    workspace_id: str
    name: str
    prefix: str
    created_at: float
    rotated_at: float | None = None
    revoked_at: float | None = None
    #: SHA-256 hex digests of the secrets that authenticate as this key (two during a grace).
    hashes: tuple[str, ...] = field(default=(), repr=False)
    #: What the key may do (``KeyScope`` values, in ``KeyScope``'s order).
    scopes: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def scope_set(self) -> frozenset[KeyScope]:
        return frozenset(KeyScope(s) for s in self.scopes)

    def public(self) -> dict[str, object]:
        """The fields the API and CLI show (times in ISO 8601 UTC)."""
        return {
            "key_id": self.key_id,
            "workspace_id": self.workspace_id,
            "name": self.name,
            "prefix": self.prefix,
            "role": role_of(self.scope_set),
            "scopes": list(self.scopes),
            "status": "active" if self.active else "revoked",
            "created_at": _iso(self.created_at),
            "rotated_at": _iso(self.rotated_at),
            "revoked_at": _iso(self.revoked_at),
        }


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly made secret with its record: the only time the secret exists in clear."""

    secret: str
    key: ApiKey


def _iso(moment: float | None) -> str | None:
    return None if moment is None else iso_utc(datetime.fromtimestamp(moment, UTC))


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_secret() -> str:
    return "gk_" + secrets.token_urlsafe(32)


def _new_key_id() -> str:
    return "kid_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    key_hash: str


class Keys:
    """Create, authenticate, rotate, revoke and list API keys.

    ``changes`` is the feed that keeps verified keys cached (the ``Gateway``'s); without it,
    nothing is cached, and revocations and rotations are still published for other processes.
    """

    def __init__(
        self,
        storage: Storage,
        events: EventBus,
        *,
        changes: ChangeFeed | None = None,
        unscoped: frozenset[KeyScope] = ROLES["inference"],
    ) -> None:
        self._storage = storage
        self._events = events
        #: What a key made before scopes existed may do (``auth.unscoped_keys``).
        self.unscoped = unscoped
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._cache: FeedCache[_Entry] = FeedCache(self.changes, "key")

    # -- the request path --------------------------------------------------------------------

    async def authenticate(self, secret: str) -> Principal | None:
        """The principal a presented key stands for, or ``None``. Reads only, never writes."""
        if not KEY_PATTERN.fullmatch(secret):
            return None
        digest = hash_key(secret)
        if (entry := self._cache.get(digest)) is not None:
            return entry.principal if hmac.compare_digest(entry.key_hash, digest) else None
        version = self._cache.version
        raw = await self._storage.get(_index_key(digest))
        if raw is None:
            return None
        record = json.loads(raw)
        # The lookup was by hash; comparing the stored digest in constant time as well keeps
        # the decision independent of how the store matched the key.
        if not hmac.compare_digest(record["hash"], digest):
            return None
        principal = Principal(
            record["workspace_id"],
            record["key_id"],
            _scopes_of(record, self.unscoped),
            retiring=bool(record.get("retiring")),
        )
        # A secret in its grace period is not cached: its entry's expiry is the store's to
        # enforce, to the second.
        if not record.get("retiring"):
            self._cache.put(digest, _Entry(principal, digest), version=version)
        return principal

    async def is_retiring(self, secret: str) -> bool:
        """Whether ``secret`` is in a rotation's grace period (or no longer works), read from
        the storage now: another instance may have rotated its key a moment ago, which this
        one's cache learns only within ``auth.cache_ttl_s`` (key management asks this)."""
        raw = await self._storage.get(_index_key(hash_key(secret)))
        return raw is None or bool(json.loads(raw).get("retiring"))

    # -- management -------------------------------------------------------------------------

    async def create(
        self,
        workspace_id: str,
        *,
        name: str = "default",
        scopes: frozenset[KeyScope] = ROLES["inference"],
    ) -> NewKey:
        """A new key of ``workspace_id`` with ``scopes`` (by default inference only)."""
        secret = _new_secret()
        digest = hash_key(secret)
        key = ApiKey(
            key_id=_new_key_id(),
            workspace_id=workspace_id,
            name=name,
            prefix=secret[:_PREFIX_LENGTH],
            created_at=await self._storage.now(),
            hashes=(digest,),
            scopes=tuple(ordered(scopes)),
        )
        await self._save(key)
        await self._index(key, digest)
        return NewKey(secret, key)

    async def get(self, workspace_id: str, key_id: str) -> ApiKey | None:
        if not KEY_ID.fullmatch(key_id):
            return None
        raw = await self._storage.map_get(f"{workspace_id}:keys", key_id)
        return _load(raw, self.unscoped) if raw is not None else None

    async def list(self, workspace_id: str) -> list[ApiKey]:
        records = await self._storage.map_items(f"{workspace_id}:keys")
        return sorted(
            (_load(raw, self.unscoped) for raw in records.values()), key=lambda k: k.created_at
        )

    async def rotate(self, workspace_id: str, key_id: str, *, grace: float = 0.0) -> NewKey:
        """A new secret for the same key id; the old one works ``grace`` more seconds (one
        already in a grace period keeps the end it was given)."""
        async with held(self._storage, _lock(workspace_id, key_id)):
            return await self._rotate(workspace_id, key_id, grace)

    async def _rotate(self, workspace_id: str, key_id: str, grace: float) -> NewKey:
        key = await self._require_active(workspace_id, key_id)
        secret = _new_secret()
        digest = hash_key(secret)
        now = await self._storage.now()
        # The new secret works first; a failure part-way leaves the old one working too,
        # never neither.
        await self._index(key, digest)
        current, retiring = key.hashes[-1:], key.hashes[:-1]
        if grace > 0:
            for old in current:
                await self._retire(old, grace)
            # Secrets already in their grace run out when they were told to (a second
            # rotation never lengthens it); those gone are dropped from the record.
            left = [old for old in retiring if await self._storage.get(_index_key(old))]
            hashes = (*left, *current, digest)
        else:
            for old in key.hashes:
                await self._retire(old, 0.0)
            hashes = (digest,)
        # Before the record: after a failure here the key still looks unrotated, and
        # rotating it again publishes again (never a rotation other processes missed).
        await self.changes.publish(*(("key", old) for old in key.hashes))
        rotated = replace(key, prefix=secret[:_PREFIX_LENGTH], rotated_at=now, hashes=hashes)
        await self._save(rotated)
        await self._publish(rotated, "rotated", now)
        return NewKey(secret, rotated)

    async def revoke(self, workspace_id: str, key_id: str) -> ApiKey:
        async with held(self._storage, _lock(workspace_id, key_id)):
            key = await self._require_active(workspace_id, key_id)
            # Unusable first: a failure part-way leaves a dead key marked active, never a
            # revoked-looking key that still works.
            for digest in key.hashes:
                await self._retire(digest, 0.0)
            await self.changes.publish(*(("key", digest) for digest in key.hashes))
            now = await self._storage.now()
            revoked = replace(key, revoked_at=now, hashes=())
            await self._save(revoked)
        await self._publish(revoked, "revoked", now)
        return revoked

    # -- internals ---------------------------------------------------------------------------

    async def _require_active(self, workspace_id: str, key_id: str) -> ApiKey:
        key = await self.get(workspace_id, key_id)
        if key is None or not key.active:
            raise NotFoundError(f"no active key {key_id} in workspace {workspace_id}")
        return key

    async def _save(self, key: ApiKey) -> None:
        record = {**asdict(key), **_role_field(key)}
        await self._storage.map_set(
            f"{key.workspace_id}:keys", key.key_id, json.dumps(record).encode()
        )

    async def _index(self, key: ApiKey, digest: str) -> None:
        entry = {
            "hash": digest,
            "key_id": key.key_id,
            "workspace_id": key.workspace_id,
            "scopes": list(key.scopes),
            **_role_field(key),
        }
        await self._storage.set(_index_key(digest), json.dumps(entry).encode())

    async def _retire(self, digest: str, grace: float) -> None:
        index = _index_key(digest)
        if grace > 0:
            raw = await self._storage.get(index)
            if raw is not None:
                entry = {**json.loads(raw), "retiring": True}
                await self._storage.set(index, json.dumps(entry).encode(), ttl=grace)
        else:
            await self._storage.delete(index)

    async def _publish(self, key: ApiKey, action: Literal["rotated", "revoked"], at: float) -> None:
        moment = datetime.fromtimestamp(at, UTC)
        data = KeyRotatedData(
            key_id=key.key_id, key_prefix=key.prefix, rotated_at=moment, action=action
        )
        await self._events.publish(Event.create(data, workspace_id=key.workspace_id, now=moment))


def _index_key(digest: str) -> str:
    """A live secret's index entry (global partition: looked up by the secret alone)."""
    return f"gk:apikey:{digest}"


def _lock(workspace_id: str, key_id: str) -> str:
    """Held while a key's secrets change: rotations and a revocation go one at a time."""
    return f"{workspace_id}:lock:key:{key_id}"


def _load(raw: bytes, unscoped: frozenset[KeyScope]) -> ApiKey:
    data = json.loads(raw)
    data["hashes"] = tuple(data.get("hashes", ()))
    data["scopes"] = tuple(ordered(_scopes_of(data, unscoped)))
    data.pop("role", None)
    return ApiKey(**data)


def _role_field(key: ApiKey) -> dict[str, str]:
    """``{"role": ...}`` for a key whose scopes are a role's, so that it keeps that role's
    scopes as they grow (an admin key gets the scopes later versions add); ``{}`` otherwise."""
    role = role_of(key.scope_set)
    return {} if role == "custom" else {"role": role}


def _scopes_of(record: dict[str, object], unscoped: frozenset[KeyScope]) -> frozenset[KeyScope]:
    """What a stored key (its record or index entry) may do: its role's scopes as they are
    now, else the scopes stored (names this version does not know are ignored), else
    ``unscoped`` (a key made before scopes existed: it keeps that when it is next saved)."""
    role = record.get("role")
    if isinstance(role, str) and role in ROLES:
        return ROLES[role]
    scopes = record.get("scopes")
    if not isinstance(scopes, list):
        return unscoped
    known = {scope.value for scope in KeyScope}
    return frozenset(KeyScope(name) for name in scopes if name in known)
