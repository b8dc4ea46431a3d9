"""Two gateways on one store: what one changes reaches the other through the change feed.

Each backend is shared as two processes would share it (one ``MemoryStorage``, two connections
to one SQLite file, two clients of one Redis). The second gateway's storage is wrapped in a spy
that counts its reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway_kit import Gateway, GatewayConfig, MemoryStorage
from gateway_kit.accounts.changes import FEED_KEY
from gateway_kit.accounts.guardian import GuardianSettings
from gateway_kit.accounts.pii import PIISettings
from gateway_kit.accounts.spend import BudgetSettings
from gateway_kit.cli import main
from gateway_kit.testing import FakeClock
from tests.accounts.spy import StorageSpy
from tests.fakes import provisioned

pytestmark = pytest.mark.anyio

#: ``auth.cache_ttl_s``. The fake clock times the gateways' background polls too: none runs by
#: itself unless a test moves the clock on.
TTL = 5.0


def config(cache_ttl: float = TTL, **fields: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {"auth": {"cache_ttl_s": cache_ttl}, "webhooks": {"worker": False}, **fields}
    )


@pytest.fixture
async def memory(clock: FakeClock) -> AsyncIterator[tuple[Any, Any]]:
    async with MemoryStorage(clock=clock) as shared:
        yield shared, shared


@asynccontextmanager
async def two_gateways(
    storages: tuple[Any, Any], clock: FakeClock, cache_ttl: float = TTL, **fields: Any
) -> AsyncIterator[tuple[Gateway, Gateway, StorageSpy]]:
    first, second = storages
    spy = StorageSpy(second)
    async with (
        Gateway(config(cache_ttl, **fields), storage=first, clock=clock) as a,
        Gateway(config(cache_ttl, **fields), storage=spy, clock=clock) as b,
    ):
        yield a, b, spy


async def test_a_revoked_key_stops_on_the_other_instance_when_it_polls(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        assert await b.keys.authenticate(made.secret) is not None  # cached on b

        await a.keys.revoke(workspace.id, made.key.key_id)
        assert await a.keys.authenticate(made.secret) is None  # at once where it was revoked
        assert await b.keys.authenticate(made.secret) is not None  # b has not polled yet
        await b.keys.changes.poll()
        assert await b.keys.authenticate(made.secret) is None


async def test_a_rotated_key_stops_on_the_other_instance_when_it_polls(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        assert await b.keys.authenticate(made.secret) is not None

        rotated = await a.keys.rotate(workspace.id, made.key.key_id)
        await b.keys.changes.poll()
        assert await b.keys.authenticate(made.secret) is None
        principal = await b.keys.authenticate(rotated.secret)
        assert principal is not None
        assert principal.key_id == made.key.key_id


async def test_a_plan_change_reaches_the_other_instance(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com", plan="starter")
        assert (await b.workspaces.cached(workspace.id) or workspace).plan == "starter"

        await a.workspaces.set_plan(workspace.id, "scale")
        assert (await b.workspaces.cached(workspace.id) or workspace).plan == "starter"
        await b.keys.changes.poll()
        assert (await b.workspaces.cached(workspace.id) or workspace).plan == "scale"


async def test_a_budget_cap_change_reaches_the_other_instance(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        assert (await b.ledger.settings(workspace.id)).cap_micro_usd is None

        await a.ledger.save_settings(workspace.id, BudgetSettings(cap_micro_usd=5_000_000))
        assert (await a.ledger.settings(workspace.id)).cap_micro_usd == 5_000_000
        assert (await b.ledger.settings(workspace.id)).cap_micro_usd is None
        await b.ledger.changes.poll()
        assert (await b.ledger.settings(workspace.id)).cap_micro_usd == 5_000_000


async def test_guardian_and_pii_settings_reach_the_other_instance(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    """(Guardian's were published under a topic no cache listened to, and reached other
    instances only when their copies aged out, ten minutes later.)"""
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        assert (await b.guardian_settings.get(workspace.id)).allow == {}
        assert (await b.pii_settings.get(workspace.id)).patterns == {}

        await a.guardian_settings.save(workspace.id, GuardianSettings(allow={"kid_1": ("*",)}))
        await a.pii_settings.save(workspace.id, PIISettings({"ACME_ID": r"ACME-\d+"}))
        assert not (await b.guardian_settings.get(workspace.id)).allow
        await b.ledger.changes.poll()
        assert (await b.guardian_settings.get(workspace.id)).allow == {"kid_1": ("*",)}
        assert (await b.pii_settings.get(workspace.id)).patterns == {"ACME_ID": r"ACME-\d+"}


async def test_billing_switched_on_and_off_reaches_the_other_instance(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        assert await b.wallet.billing(workspace.id) is False

        await a.wallet.set_billing(workspace.id, True)
        await b.wallet.changes.poll()
        assert await b.wallet.billing(workspace.id) is True
        await a.wallet.set_billing(workspace.id, False)
        assert await b.wallet.billing(workspace.id) is True
        await b.wallet.changes.poll()
        assert await b.wallet.billing(workspace.id) is False


async def test_a_revocation_holds_within_cache_ttl_even_when_no_poll_runs(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(storages, clock) as (a, b, spy):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        assert await b.keys.authenticate(made.secret) is not None
        spy.failing = lambda method, key: key == FEED_KEY  # b's polls fail from now on

        await a.keys.revoke(workspace.id, made.key.key_id)
        with pytest.raises(Exception, match="storage is down"):
            await b.keys.changes.poll()
        clock.advance(TTL - 0.1)
        assert await b.keys.authenticate(made.secret) is not None  # inside the bound
        clock.advance(0.1)
        assert await b.keys.authenticate(made.secret) is None  # the bound: storage decides


async def test_a_warm_key_costs_no_storage_read_for_minutes(
    memory: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(memory, clock) as (a, b, spy):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        await a.wallet.set_billing(workspace.id, True)

        async def request_path() -> None:
            principal = await b.keys.authenticate(made.secret)
            assert principal is not None
            assert await b.workspaces.cached(principal.workspace_id) is not None
            await b.ledger.settings(principal.workspace_id)
            assert await b.wallet.billing(principal.workspace_id) is True

        await b.keys.changes.poll()  # b has the billing change: nothing left to drop
        await request_path()
        assert len(spy.reads()) == 4  # the cold request: one read of each
        spy.calls.clear()
        for _ in range(100):  # five minutes, 100 requests every 3 s
            clock.advance(3)
            await b.keys.changes.next_poll(wake=False)  # the background poll comes
            for _ in range(100):
                await request_path()
        assert spy.reads() == []
        assert spy.polls() >= 100
        assert len(spy.calls) == spy.background()  # background polls only, nothing per request


async def test_twelve_thousand_workspaces_stay_warm(
    memory: tuple[Any, Any], clock: FakeClock
) -> None:
    """More keys and workspaces than the old 10,000-entry bound, used round-robin: after the
    first round, no request reads storage, minutes later still."""
    async with two_gateways(memory, clock) as (a, b, spy):
        secrets = []
        for n in range(12_000):
            workspace = await a.workspaces.create(f"team{n}@example.com")
            secrets.append((await a.keys.create(workspace.id)).secret)
        for round_ in range(4):
            if round_ == 1:
                assert len(spy.reads()) == 24_000  # the cold round: key and plan, once each
                spy.calls.clear()
            for secret in secrets:
                principal = await b.keys.authenticate(secret)
                assert principal is not None
                assert await b.workspaces.cached(principal.workspace_id) is not None
            clock.advance(60)
            await b.keys.changes.next_poll(wake=False)
        assert spy.reads() == []


async def test_the_background_loop_carries_a_revocation(
    memory: tuple[Any, Any], clock: FakeClock
) -> None:
    async with two_gateways(memory, clock) as (a, b, _):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        assert await b.keys.authenticate(made.secret) is not None
        await a.keys.revoke(workspace.id, made.key.key_id)
        await b.keys.changes.next_poll()
        assert await b.keys.authenticate(made.secret) is None


async def test_with_cache_ttl_zero_every_read_asks_storage(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    off = {"cache": {"mode": "off"}}  # the answer cache listens to the feed: see below
    async with two_gateways(storages, clock, cache_ttl=0, **off) as (a, b, spy):
        workspace = await a.workspaces.create("team@example.com")
        made = await a.keys.create(workspace.id)
        for _ in range(3):
            assert await b.keys.authenticate(made.secret) is not None
            assert await b.wallet.billing(workspace.id) is False
        assert len(spy.reads()) == 6
        assert spy.polls() == 0  # nothing cached, nothing to poll for
        await a.keys.revoke(workspace.id, made.key.key_id)
        assert await b.keys.authenticate(made.secret) is None


async def test_a_purge_of_the_answer_cache_reaches_the_other_instance(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    """Answers are kept per process; a purge on one reaches the others through the feed,
    which is polled for it even when no account record is cached (``cache_ttl`` 0)."""
    from gateway_kit.cache import CachedAnswer, CacheKey
    from gateway_kit.cost.usage import Usage

    answer = CachedAnswer.made("m", {"content": "hi"}, "stop", Usage(1, 1))
    local = {"cache": {"store": "local"}}
    async with two_gateways(storages, clock, cache_ttl=0, **local) as (a, b, _):
        for gateway in (a, b):
            gateway.cache.local.put_now(CacheKey("ws_a", "m", "k1"), answer)
            gateway.cache.local.put_now(CacheKey("ws_b", "m", "k1"), answer)
        assert await a.cache.purge("ws_a") == 1
        assert len(b.cache.local) == 2  # not polled yet
        await b.keys.changes.next_poll()
        assert b.cache.local.get_now(CacheKey("ws_a", "m", "k1")) is None
        assert b.cache.local.get_now(CacheKey("ws_b", "m", "k1")) is not None
        await a.cache.purge(None)  # everything
        await b.keys.changes.next_poll()
        assert len(b.cache.local) == 0


async def test_a_key_revoked_by_the_cli_stops_working_in_a_running_gateway(
    tmp_path: Path, clock: FakeClock
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path}/state.db"\n\n'
        f"[auth]\ncache_ttl_s = {TTL}\n\n[webhooks]\nworker = false\n"
    )
    gateway_config = config(storage={"url": f"sqlite:///{tmp_path}/state.db"})
    async with Gateway(gateway_config, clock=clock) as gateway:
        workspace = await gateway.workspaces.create("team@example.com")
        made = await gateway.keys.create(workspace.id)
        assert await gateway.keys.authenticate(made.secret) is not None

        argv = ["keys", "revoke", made.key.key_id, "--workspace", workspace.id]
        code = await anyio.to_thread.run_sync(main, [*argv, "--config", str(config_file)])
        assert code == 0
        assert await gateway.keys.authenticate(made.secret) is not None  # not polled yet
        await gateway.keys.changes.poll()
        assert await gateway.keys.authenticate(made.secret) is None


class ReadCounting(MemoryStorage):
    """Counts reads of the records the request path caches."""

    cached_reads = 0

    async def get(self, key: str) -> bytes | None:
        if key.startswith("gk:apikey:") or key.endswith(
            (":workspace", ":budget:settings", ":wallet:billing")
        ):
            self.cached_reads += 1
        return await super().get(key)


async def test_chat_requests_on_a_warm_key_read_no_account_record() -> None:
    async with provisioned("scale", storage_class=ReadCounting, auth={"cache_ttl_s": TTL}) as env:
        assert (await env.chat()).status == 200  # warms the caches
        storage: ReadCounting = env.storage
        storage.cached_reads = 0
        for _ in range(100):  # five minutes
            env.clock.advance(3)
            await env.gateway.keys.changes.next_poll(wake=False)
            assert (await env.chat()).status == 200
        assert storage.cached_reads == 0


async def test_with_the_shared_store_one_instance_serves_what_another_stored(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    """``cache.store = "storage"`` (what ``auto`` picks on Redis): answers and the semantic
    index live in the storage; an answer one instance stored is served by the other, by the
    same request and by one that means the same, and a purge through one is seen by both."""
    pytest.importorskip("wordllama", reason="the semantic extra is not installed")
    from gateway_kit import create_app
    from gateway_kit.accounts.scopes import ROLES
    from gateway_kit.testing import ASGIRecorder

    cache = {"store": "storage", "semantic": {"models": ["mock-large"]}}
    async with two_gateways(storages, clock, cache=cache) as (a, b, _):
        assert a.cache.shared
        workspace = await a.workspaces.create("team@example.com", plan="scale")
        key = (await a.keys.create(workspace.id, scopes=ROLES["admin"])).secret
        first, second = ASGIRecorder(create_app(gateway=a)), ASGIRecorder(create_app(gateway=b))

        async def ask(app: ASGIRecorder, text: str) -> str:
            payload = {
                "model": "mock-large",
                "messages": [{"role": "user", "content": text}],
                "temperature": 0,
            }
            headers = {"authorization": f"Bearer {key}"}
            response = await app.request(
                "POST", "/v1/chat/completions", json=payload, headers=headers
            )
            assert response.status == 200
            return str(response.headers["x-gateway-cache"])

        assert await ask(first, "What is the largest ocean on Earth?") == "miss"
        assert await ask(second, "What is the largest ocean on Earth?") == "hit"
        assert await ask(second, "Which is the largest ocean on Earth?") == "semantic"
        assert await ask(second, "What is the largest ocean on Mars?") == "miss"
        # The first instance's mirror of the partition (read when it was empty) takes in the
        # other's additions from the change log.
        assert await ask(first, "Which is the largest ocean on Mars?") == "semantic"
        path = f"/api/v1/workspaces/{workspace.id}/cache"
        purge = await first.request("DELETE", path, headers={"authorization": f"Bearer {key}"})
        assert purge.json()["purged"] == 2  # Earth's answer and Mars's
        assert await ask(second, "What is the largest ocean on Earth?") == "miss"
