"""storage_from_url picks the backend a configuration names."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_kit import Gateway, GatewayConfig, StorageConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import MemoryStorage, SQLiteStorage, storage_from_url
from gateway_kit.testing.storage import FakeClock
from tests.storage.conftest import PrivateRedis

pytestmark = pytest.mark.anyio


async def test_memory_url_takes_options() -> None:
    clock = FakeClock()
    storage = storage_from_url("memory://", max_keys=1, clock=clock)
    assert isinstance(storage, MemoryStorage)
    assert await storage.now() == clock()
    await storage.set("ws_1:a", b"v")
    with pytest.raises(StorageError, match="full"):
        await storage.set("ws_1:b", b"v")


async def test_sqlite_urls_take_relative_and_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with storage_from_url("sqlite:///relative.db") as storage:
        assert isinstance(storage, SQLiteStorage)
        await storage.set("ws_1:k", b"v")
    assert (tmp_path / "relative.db").exists()
    absolute = tmp_path / "sub dir" / "abs.db"
    absolute.parent.mkdir()
    async with storage_from_url(f"sqlite:///{absolute}".replace(" ", "%20")) as storage:
        await storage.set("ws_1:k", b"v")
    assert absolute.exists()


@pytest.mark.redis
async def test_redis_url(redis_url: str, redis_prefix: str) -> None:
    from gateway_kit.storage.redis import RedisStorage

    async with storage_from_url(redis_url, prefix=redis_prefix) as storage:
        assert isinstance(storage, RedisStorage)
        assert (await storage.incr("ws_1:c", 2)).value == 2


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://user:secretpw@db/x", "scheme 'postgres'"),
        ("sqlite://", "sqlite:///"),
        ("sqlite:///", "sqlite:///"),
        ("nonsense", "scheme ''"),
    ],
)
def test_bad_urls_are_refused_without_repeating_them(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        storage_from_url(url)
    assert "secretpw" not in str(caught.value)


@pytest.mark.redis
async def test_the_redis_prefix_applies_to_every_redis_scheme(
    private_redis: PrivateRedis, redis_prefix: str
) -> None:
    """``storage.redis_prefix`` is kept for ``unix://`` URLs too (it used to be dropped)."""
    for url in (private_redis.unix_url, private_redis.user_url):
        config = GatewayConfig(storage=StorageConfig(url=url, redis_prefix=redis_prefix))
        async with Gateway(config, run_worker=False) as gateway:
            await gateway.storage.set("ws_1:k", b"v")
            assert await gateway.storage.get("ws_1:k") == b"v"
        async with storage_from_url(url) as bare:  # the default prefix sees nothing
            assert await bare.get("ws_1:k") is None
        async with storage_from_url(url, redis_prefix=redis_prefix) as same:
            assert await same.get("ws_1:k") == b"v"
            await same.delete("ws_1:k")
