"""What an API key may do: scopes, and the roles that name the usual sets of them.

- ``inference``: ``POST /v1/chat/completions``, ``POST /v1/embeddings``, ``GET /v1/models``
  and ``GET /v1/me``;
- ``keys:read`` / ``keys:write``: list and read the workspace's keys / create, rotate and
  revoke them;
- ``webhooks:read`` / ``webhooks:write``: list, read and read the delivery log of webhooks /
  create, change, delete, test and replay them;
- ``budget:read`` / ``budget:write``: read the budget and wallet / set the workspace's cap and
  the keys' caps;
- ``guardian:read`` / ``guardian:write``: read Guardian's rules in force and recent blocks /
  set the keys' own thresholds and allow-lists;
- ``pii:read`` / ``pii:write``: read PII masking's settings / set the workspace's own patterns
  and allow-list;
- ``cache:read`` / ``cache:write``: read the answer cache's settings and counts / purge the
  workspace's cached answers;
- ``requests:read``: read the request log and the usage totals (there is nothing to write).

``<x>:write`` includes ``<x>:read``. The roles: ``admin`` (every scope: the workspace's owner)
and ``inference`` (model calls only: what an application runs with). A key never hands out
more than it holds: the keys it creates, rotates or revokes must have no scope it lacks. A
key's own cap is changed only by a key holding every scope, or by the operator.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Literal

__all__ = [
    "ADMIN_SCOPES",
    "ROLES",
    "KeyScope",
    "Role",
    "ScopeError",
    "ordered",
    "parse_scopes",
    "role_of",
    "role_scopes",
]


class KeyScope(StrEnum):
    INFERENCE = "inference"
    KEYS_READ = "keys:read"
    KEYS_WRITE = "keys:write"
    WEBHOOKS_READ = "webhooks:read"
    WEBHOOKS_WRITE = "webhooks:write"
    BUDGET_READ = "budget:read"
    BUDGET_WRITE = "budget:write"
    GUARDIAN_READ = "guardian:read"
    GUARDIAN_WRITE = "guardian:write"
    PII_READ = "pii:read"
    PII_WRITE = "pii:write"
    CACHE_READ = "cache:read"
    CACHE_WRITE = "cache:write"
    REQUESTS_READ = "requests:read"


Role = Literal["admin", "inference"]

ADMIN_SCOPES: frozenset[KeyScope] = frozenset(KeyScope)
ROLES: dict[str, frozenset[KeyScope]] = {
    "admin": ADMIN_SCOPES,
    "inference": frozenset({KeyScope.INFERENCE}),
}
_IMPLIED = {
    KeyScope.KEYS_WRITE: KeyScope.KEYS_READ,
    KeyScope.WEBHOOKS_WRITE: KeyScope.WEBHOOKS_READ,
    KeyScope.BUDGET_WRITE: KeyScope.BUDGET_READ,
    KeyScope.GUARDIAN_WRITE: KeyScope.GUARDIAN_READ,
    KeyScope.PII_WRITE: KeyScope.PII_READ,
    KeyScope.CACHE_WRITE: KeyScope.CACHE_READ,
}


class ScopeError(ValueError):
    """A scope or role name that does not exist."""


def parse_scopes(names: Iterable[str]) -> frozenset[KeyScope]:
    """KeyScope names as given (``keys:write`` brings ``keys:read`` along); ``ScopeError`` for an
    unknown one."""
    scopes: set[KeyScope] = set()
    for name in names:
        try:
            scope = KeyScope(name)
        except ValueError:
            known = ", ".join(s.value for s in KeyScope)
            raise ScopeError(f"unknown scope {name!r} (known: {known})") from None
        scopes.add(scope)
        if (implied := _IMPLIED.get(scope)) is not None:
            scopes.add(implied)
    return frozenset(scopes)


def role_scopes(role: str) -> frozenset[KeyScope]:
    """The scopes of a role; ``ScopeError`` for an unknown one."""
    try:
        return ROLES[role]
    except KeyError:
        raise ScopeError(f"unknown role {role!r} (known: {', '.join(ROLES)})") from None


def role_of(scopes: frozenset[KeyScope]) -> str:
    """The role a scope set amounts to, or ``custom``."""
    for name, members in ROLES.items():
        if scopes == members:
            return name
    return "custom"


def ordered(scopes: Iterable[KeyScope]) -> list[str]:
    """KeyScope names in the order of ``KeyScope`` (as the API shows them)."""
    present = set(scopes)
    return [s.value for s in KeyScope if s in present]
