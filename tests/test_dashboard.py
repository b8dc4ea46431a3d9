"""The dashboard in a real headless browser (Debian's Chromium through its ChromeDriver), against
`gateway-kit serve` on loopback with 10,000 requests in its log: what a workspace's key shows,
what the operator's token shows, how fast it loads, and that no key or secret appears in the
page or in anything it fetched."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit import Gateway, load_config
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.layers.cache.policy import CacheVerdict
from gateway_kit.observe.record import RequestRecord
from tests.servers import serving

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "operator-token-for-the-dashboard-0123456789"
HOOK_SECRET = "whsec_" + "d" * 40
SEEDED = 10_000
CONFIG = """
default_plan = "scale"

[storage]
url = "sqlite:///{db}"

[plans.scale]
included_requests = 100000
burst_limit_rpm = 6000
budget_usd = 25

[admin]
token = "{token}"

[webhooks]
allow_http = true
allow = ["127.0.0.0/8"]
"""


def _browser() -> Any:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        reason = "the dashboard's browser test needs Debian's chromium and chromium-driver"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: .ci/run installs them", pytrace=False)
        pytest.skip(f"{reason} (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = _browser()
    try:
        yield driver
    finally:
        driver.quit()


def _seed(config_file: Path) -> tuple[str, str, str]:
    """A workspace with an admin key, a webhook, a rotated key (an event) and 10,000 requests
    in its log over the last days; (workspace id, admin key, rotated key)."""
    config = load_config(str(config_file))

    async def run() -> tuple[str, str, str]:
        async with Gateway(config, run_worker=False) as gateway:
            workspace = await gateway.workspaces.create("team@example.com", plan="scale")
            admin = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
            other = await gateway.keys.create(workspace.id)
            await gateway.keys.rotate(workspace.id, other.key.key_id, grace=0)
            log = gateway.requests
            now = time.time()
            for index in range(SEEDED):
                log.add(
                    RequestRecord(
                        request_id=f"req_{index:032x}",
                        at=now - (SEEDED - index) * 30,
                        route="chat",
                        workspace_id=workspace.id,
                        key_id=admin.key.key_id,
                        model="mock-large" if index % 3 else "mock-mini",
                        served_model="mock-large" if index % 3 else "mock-mini",
                        provider="mock",
                        status=200 if index % 17 else 429,
                        error_code=None if index % 17 else "rate_limit_exceeded",
                        stream=bool(index % 2),
                        completed=True,
                        input_tokens=40,
                        cached_tokens=0,
                        output_tokens=120,
                        reasoning_tokens=0,
                        usage_estimated=False,
                        cost_micro_usd=900 if index % 17 else None,
                        savings_micro_usd=300,
                        total_ms=12.5,
                        upstream_ms=10.0,
                        ttft_ms=None,
                        verdicts={"cache": CacheVerdict(action="miss")},
                        fallbacks=(),
                        retries=0,
                    )
                )
            await log.flush()
            return workspace.id, admin.secret, other.secret

    return anyio.run(run)


def _urls_fetched(driver: Any) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _wait_loaded(driver: Any, within: float = 10.0) -> float:
    """Wait until the page says it loaded; how long after navigation it did (ms)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        loaded = driver.execute_script("return document.body.dataset.loadedAfterMs || null")
        if loaded is not None:
            return float(loaded)
        error = driver.execute_script("return document.getElementById('sign-in-error').textContent")
        assert not error, error
        time.sleep(0.02)
    raise AssertionError("the dashboard did not finish loading")


def test_the_dashboard_shows_a_workspace_and_the_operator_view(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    config_file = tmp_path / "gateway.toml"
    config_file.write_text(CONFIG.format(db=tmp_path / "state.db", token=ADMIN_TOKEN))
    workspace_id, key, other_key = _seed(config_file)
    with serving("--config", str(config_file), cwd=tmp_path) as (_, base_url):
        auth = {"authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base_url, headers=auth, timeout=10) as client:
            hook = client.post(
                f"/api/v1/workspaces/{workspace_id}/webhooks",
                json={"name": "ops", "url": "http://127.0.0.1:9/hook", "secret": HOOK_SECRET},
            )
            assert hook.status_code == 201, hook.text
            for _ in range(3):
                chat = {"model": "mock-mini", "messages": [{"role": "user", "content": "hi"}]}
                assert client.post("/v1/chat/completions", json=chat).status_code == 200
        time.sleep(1.5)  # the request log's interval: the three are written

        browser.get(base_url + "/dashboard")
        browser.find_element(By.ID, "token").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        _wait_loaded(browser)
        browser.refresh()  # signed in: measure a whole load
        loaded_ms = _wait_loaded(browser)
        assert loaded_ms < 1000, f"loaded in {loaded_ms} ms"
        print(f"dashboard loaded in {loaded_ms:.0f} ms")

        text = browser.find_element(By.TAG_NAME, "body").text
        assert workspace_id in text
        assert "quota" in text.lower()
        assert "/ 100,000" in text
        assert "burst limit 6000" in text
        assert "verdict: ok" in text  # the budget
        assert "mock-large" in text
        assert "mock-mini" in text
        rects = browser.find_elements(By.CSS_SELECTOR, "#usage svg rect")
        assert len(rects) >= 2
        rows = browser.find_elements(By.CSS_SELECTOR, "#requests tr")
        assert len(rows) == 26  # a header and the 25 newest
        assert "ops (active)" in text  # the webhook
        assert "key.rotated" in text  # the recent events
        assert "cache: miss" in text or "limits: pass" in text

        # No key or secret in the page, nor in anything it fetched, but the key typed in.
        page = browser.page_source
        fetched = _urls_fetched(browser)
        assert any("/requests" in url for url in fetched)
        with httpx.Client(headers=auth, timeout=10) as client:
            bodies = [client.get(url).text for url in fetched if url.startswith(base_url)]
        for secret in (key, other_key, HOOK_SECRET, ADMIN_TOKEN):
            assert secret not in page
            assert all(secret not in url for url in fetched)
            assert all(secret not in body for body in bodies)

        # The operator's view.
        browser.find_element(By.ID, "sign-out").click()
        browser.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
        browser.find_element(By.CSS_SELECTOR, "input[value=operator]").click()
        browser.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        _wait_loaded(browser)
        operator = browser.find_element(By.ID, "workspaces").text
        assert workspace_id in operator
        assert "team@example.com" in operator
        assert ADMIN_TOKEN not in browser.page_source

        # A wrong key is refused in place.
        browser.find_element(By.ID, "sign-out").click()
        browser.find_element(By.ID, "token").send_keys("gk_live_not_a_key")
        browser.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            error = browser.find_element(By.ID, "sign-in-error").text
            if error:
                break
            time.sleep(0.02)
        assert "not accepted" in error


def test_the_dashboard_works_with_the_gateway_mounted_under_a_path(
    tmp_path: Path, browser: Any
) -> None:
    """The README's embedding: create_app mounted under /llm of the host's app. The page once
    loaded its assets and called the API at the host's root (/dashboard/static/..., /v1/me)."""
    from contextlib import asynccontextmanager

    from selenium.webdriver.common.by import By
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from gateway_kit import GatewayConfig, create_app
    from gateway_kit.testing import run_server

    config = GatewayConfig.model_validate({"storage": {"url": f"sqlite:///{tmp_path}/s.db"}})

    async def make_key() -> tuple[str, str]:
        async with Gateway(config, run_worker=False) as gateway:
            created = await gateway.workspaces.create("host@example.com")
            key = await gateway.keys.create(created.id, scopes=ROLES["admin"])
            return created.id, key.secret

    workspace_id, key = anyio.run(make_key)
    gateway = Gateway(config, run_worker=False)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        async with gateway:
            yield

    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("the host's own page")

    host = Starlette(
        routes=[Route("/", home), Mount("/llm", app=create_app(gateway=gateway))],
        lifespan=lifespan,
    )
    with run_server(host) as base_url:
        browser.get(base_url + "/llm/dashboard")
        browser.find_element(By.ID, "token").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        _wait_loaded(browser)
        assert workspace_id in browser.find_element(By.TAG_NAME, "body").text
        fetched = [url for url in _urls_fetched(browser) if url.startswith(base_url)]
        assert any(url.endswith("/llm/dashboard/static/app.js") for url in fetched)
        outside = [url for url in fetched if not url.startswith(base_url + "/llm/")]
        assert outside in ([], [base_url + "/favicon.ico"])  # the browser's own, not the page's
