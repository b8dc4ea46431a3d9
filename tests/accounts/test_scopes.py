"""Scopes and roles as plain values, and who a key is to the Auth policy (no ASGI)."""

from __future__ import annotations

import pytest

from gateway_kit import Gateway, GatewayConfig, MemoryStorage
from gateway_kit.accounts.scopes import (
    ROLES,
    KeyScope,
    ScopeError,
    ordered,
    parse_scopes,
    role_of,
    role_scopes,
)
from gateway_kit.layers.auth import AuthPolicy


def test_write_brings_read_and_roles_name_the_usual_sets() -> None:
    assert parse_scopes(["keys:write"]) == {KeyScope.KEYS_WRITE, KeyScope.KEYS_READ}
    assert parse_scopes(["inference", "inference"]) == {KeyScope.INFERENCE}
    assert role_scopes("admin") == frozenset(KeyScope)
    assert role_of(ROLES["inference"]) == "inference"
    assert role_of(frozenset(KeyScope)) == "admin"
    assert role_of(parse_scopes(["budget:read"])) == "custom"
    assert ordered({KeyScope.BUDGET_READ, KeyScope.INFERENCE}) == ["inference", "budget:read"]


@pytest.mark.parametrize("call", [lambda: parse_scopes(["root"]), lambda: role_scopes("owner")])
def test_unknown_names_say_what_exists(call: object) -> None:
    with pytest.raises(ScopeError, match="known: "):
        call()  # type: ignore[operator]


@pytest.mark.anyio
async def test_the_policy_checks_the_key_its_workspace_and_the_scope() -> None:
    config = GatewayConfig.model_validate({"storage": {"url": "memory://"}})
    async with MemoryStorage() as storage, Gateway(config, storage=storage) as gateway:
        workspace = await gateway.workspaces.create("a@example.com")
        app = await gateway.keys.create(workspace.id)
        admin = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
        policy = AuthPolicy(gateway)
        keys_path = f"/api/v1/workspaces/{workspace.id}/keys"

        def bearer(secret: str) -> bytes:
            return f"Bearer {secret}".encode()

        allowed = await policy.check(bearer(app.secret), "/v1/chat/completions", KeyScope.INFERENCE)
        assert allowed.principal is not None
        assert allowed.principal.scopes == ROLES["inference"]
        refused = await policy.check(bearer(app.secret), keys_path, KeyScope.KEYS_WRITE)
        assert refused.refusal is not None
        assert (refused.refusal.status, refused.refusal.code) == (403, "missing_scope")
        assert "'keys:write'" in refused.refusal.message
        assert "(its role: inference)" in refused.refusal.message
        assert (
            await policy.check(bearer(admin.secret), keys_path, KeyScope.KEYS_WRITE)
        ).refusal is None
        # No scope asked: any key of a live workspace.
        assert (await policy.check(bearer(app.secret), keys_path, None)).refusal is None

        await gateway.workspaces.update(workspace.id, status="suspended")
        suspended = await policy.check(bearer(admin.secret), keys_path, KeyScope.KEYS_READ)
        assert suspended.refusal is not None
        assert suspended.refusal.code == "workspace_suspended"


@pytest.mark.anyio
async def test_a_role_key_keeps_its_roles_scopes_as_they_grow() -> None:
    """An admin key stored by a version with fewer scopes gets every scope of today's admin;
    scope names this version does not know are ignored."""
    import json

    config = GatewayConfig.model_validate({"storage": {"url": "memory://"}})
    async with MemoryStorage() as storage, Gateway(config, storage=storage) as gateway:
        workspace = await gateway.workspaces.create("a@example.com")
        admin = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
        custom = await gateway.keys.create(workspace.id, scopes=parse_scopes(["inference"]))
        [digest] = admin.key.hashes
        entry = json.loads(await storage.get(f"gk:apikey:{digest}"))
        assert entry["role"] == "admin"
        entry["scopes"] = ["inference"]  # as an older version, with fewer scopes, wrote it
        await storage.set(f"gk:apikey:{digest}", json.dumps(entry).encode())
        principal = await gateway.keys.authenticate(admin.secret)
        assert principal is not None
        assert principal.scopes == ROLES["admin"]
        [digest] = custom.key.hashes
        entry = json.loads(await storage.get(f"gk:apikey:{digest}"))
        assert "role" not in entry or entry["role"] == "inference"
        entry.pop("role", None)
        entry["scopes"] = ["inference", "quantum:write"]  # a scope of a newer version
        await storage.set(f"gk:apikey:{digest}", json.dumps(entry).encode())
        principal = await gateway.keys.authenticate(custom.secret)
        assert principal is not None
        assert principal.scopes == {KeyScope.INFERENCE}
        listed = {k.key_id: k for k in await gateway.keys.list(workspace.id)}
        assert listed[admin.key.key_id].scope_set == ROLES["admin"]
