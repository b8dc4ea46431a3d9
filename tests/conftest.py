from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis (``GATEWAY_KIT_TEST_REDIS_URL``, default database 15 on localhost).

    Unreachable, the Redis tests skip, except under ``CI=true``, where they fail: CI must run
    them against the real server.
    """
    import redis

    url = os.environ.get("GATEWAY_KIT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        reason = f"Redis for the tests is unreachable ({type(exc).__name__})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: under CI=true the Redis suite must run", pytrace=False)
        pytest.skip(f"{reason}; set GATEWAY_KIT_TEST_REDIS_URL or start Redis")
    finally:
        client.close()
    return url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own, its keys deleted afterwards (never FLUSHDB: the server
    is shared)."""
    import redis

    prefix = f"gktest:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
