"""The ``serve`` benchmark's setup: a user's configuration file, and workspaces with keys.

``write_config`` writes what a production user would; ``provision_with_cli`` makes one
workspace and key with ``gateway-kit workspaces create --with-key --json``, as a user does;
``provision_many`` makes thousands through one ``Gateway`` and a few concurrent tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MODEL",
    "PROVISIONING_TASKS",
    "Setup",
    "provision_many",
    "provision_with_cli",
    "write_config",
]

MODEL = "gpt-4o-mini"
#: Below the Redis storage's default connection pool (32), so no task waits for a connection.
PROVISIONING_TASKS = 16


@dataclass(frozen=True, slots=True)
class Setup:
    """One ``gateway-kit serve`` target: its storage, keys, and any setting off the defaults."""

    label: str
    redis: bool
    keys: int = 1
    transport: str | None = None
    worker: bool = True
    #: ``--log-level``; ``warning`` turns uvicorn's access log off.
    log_level: str | None = None


def write_config(
    path: Path, setup: Setup, *, upstream: str, port: int, storage: str, redis_prefix: str
) -> Path:
    """The TOML a production user writes, with every limit far above the load.

    Nothing else is set but Guardian, off (it would refuse the benchmark's one request sent
    again and again): Auth, Limits, Budget and the webhook worker keep their defaults (on), and
    so does the provider's transport, unless ``setup`` changes it.
    """
    store = [f"url = {json.dumps(storage)}"]
    if setup.redis:
        store.append(f"redis_prefix = {json.dumps(redis_prefix)}")
    provider = ['name = "openai"', f'base_url = "{upstream}/v1"', 'api_key = "sk-bench"']
    if setup.transport:
        provider.append(f'transport = "{setup.transport}"')
    sections = {
        "": ['default_plan = "bench"'],
        "[server]": [f"port = {port}"],
        "[storage]": store,
        "[plans.bench]": [
            "included_requests = 1_000_000_000_000",
            "burst_limit_rpm = 1_000_000_000",
            "budget_usd = 100_000_000",
        ],
        "[[providers]]": provider,
        # The price table knows it: Budget reserves and settles every request.
        "[[models]]": [f'name = "{MODEL}"', 'provider = "openai"'],
        # Guardian is measured by `bench guardian`.
        "[guardian]": ['mode = "off"'],
    }
    if not setup.worker:
        sections["[webhooks]"] = ["worker = false"]
    blocks = (
        "\n".join([header, *lines] if header else lines) for header, lines in sections.items()
    )
    path.write_text("\n\n".join(blocks) + "\n")
    return path


def provision_with_cli(config: Path) -> str:
    """One workspace and its key, as a user makes them; returns the key."""
    command = [sys.executable, "-m", "gateway_kit.cli", "workspaces", "create"]
    command += ["--email", "bench@example.com", "--with-key", "--json", "--config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
    key: str = json.loads(done.stdout)["key"]
    return key


def provision_many(config: Path, count: int, *, concurrency: int = PROVISIONING_TASKS) -> list[str]:
    """``count`` workspaces of one key each, made by ``concurrency`` tasks; returns the keys."""
    import anyio

    from gateway_kit import Gateway, load_config

    keys: list[str] = []
    todo = iter(range(count))

    async def make(gateway: Gateway) -> None:
        for i in todo:
            workspace = await gateway.workspaces.create(f"bench{i}@example.com")
            keys.append((await gateway.keys.create(workspace.id)).secret)

    async def main() -> None:
        gateway = Gateway(load_config(config), run_worker=False)
        async with gateway, anyio.create_task_group() as tasks:
            for _ in range(concurrency):
                tasks.start_soon(make, gateway)

    anyio.run(main)
    return keys
