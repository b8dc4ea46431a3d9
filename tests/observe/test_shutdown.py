"""``kill -TERM`` during load loses no record of a request that got an answer: uvicorn lets the
requests in flight finish, then the lifespan ends and the request log writes what it holds."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import anyio
import httpx
import pytest

from gateway_kit import Gateway, load_config
from gateway_kit.accounts.scopes import ROLES
from tests.servers import serving

pytestmark = pytest.mark.slow

CONFIG = """
default_plan = "scale"

[storage]
url = "sqlite:///{db}"

[[providers]]
name = "slow"
type = "mock"
faults = {{ latency_s = 0.05 }}

[[models]]
name = "mock-slow"
provider = "slow"

[plans.scale]
included_requests = 100000
burst_limit_rpm = 100000

[guardian]
mode = "off"

[request_log]
flush_interval_s = 30
"""


def test_a_term_during_load_loses_no_answered_request(tmp_path: Path) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(CONFIG.format(db=tmp_path / "state.db"))
    config = load_config(str(config_file))

    async def provision() -> tuple[str, str]:
        async with Gateway(config, run_worker=False) as gateway:
            workspace = await gateway.workspaces.create("ops@example.com", plan="scale")
            key = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
            return workspace.id, key.secret

    workspace_id, key = anyio.run(provision)
    answered: list[str] = []
    failed = 0
    with serving("--config", str(config_file), cwd=tmp_path) as (output, base_url):
        pid = next(
            int(line.split("[")[1].split("]")[0])
            for line in output
            if "Started server process" in line
        )
        enough = threading.Event()

        async def load() -> None:
            nonlocal failed
            body = {"model": "mock-slow", "messages": [{"role": "user", "content": "hi"}]}
            headers = {"authorization": f"Bearer {key}"}
            limits = httpx.Limits(max_connections=16)
            async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=10) as client:

                async def worker() -> None:
                    nonlocal failed
                    while True:
                        try:
                            response = await client.post(
                                "/v1/chat/completions", json=body, headers=headers
                            )
                        except httpx.HTTPError:
                            failed += 1
                            return  # the server is going away
                        assert response.status_code == 200, response.text
                        answered.append(response.headers["x-request-id"])
                        if len(answered) >= 100:
                            enough.set()

                async with anyio.create_task_group() as tasks:
                    for _ in range(16):
                        tasks.start_soon(worker)

        def terminate() -> None:
            enough.wait(30)
            os.kill(pid, signal.SIGTERM)

        killer = threading.Thread(target=terminate)
        killer.start()
        anyio.run(load)
        killer.join()
    assert len(answered) >= 100
    assert failed  # the load was still going when the server stopped

    async def logged() -> set[str]:
        async with Gateway(config, run_worker=False) as gateway:
            page = await gateway.requests.page(workspace_id, limit=1000)
            seen = {record["id"] for record in page.records}
            while page.next_cursor is not None:
                page = await gateway.requests.page(
                    workspace_id, cursor=page.next_cursor, limit=1000
                )
                seen |= {record["id"] for record in page.records}
            return seen

    records = anyio.run(logged)
    assert set(answered) <= records
