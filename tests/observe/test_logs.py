"""The log lines: a line per request (text or JSON), failures at warning with ids, uvicorn's
access lines of the inference routes left to the request lines, and no key or secret in any
line the gateway writes."""

from __future__ import annotations

import json
import logging
import logging.config
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from gateway_kit.config import LogsConfig
from gateway_kit.observe.logs import JSONFormatter, logging_config
from gateway_kit.testing import run_server
from tests.fakes import provisioned
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.anyio

ADMIN_TOKEN = "operator-secret-token-0123456789abcdef"
HOOK_SECRET = "whsec_" + "s" * 40
LOOPBACK = {"allow_http": True, "allow": ["127.0.0.0/8"]}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    with run_server(endpoint) as base_url:
        endpoint.base_url = base_url
        yield endpoint


@contextmanager
def watching(name: str, handler: logging.Handler) -> Iterator[None]:
    logging.getLogger(name).addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger(name).removeHandler(handler)


def every_rendering(records: list[logging.LogRecord]) -> str:
    """Each record as the text and the JSON formatter write it."""
    text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    as_json = JSONFormatter()
    return "\n".join(f"{text.format(r)}\n{as_json.format(r)}" for r in records)


async def test_no_key_or_secret_reaches_a_log_line(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    url = receiver.script("/always-fails", [500])
    attempt_logged = anyio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "attempt 1" in record.getMessage():
                attempt_logged.set()

    config = {"admin": {"token": ADMIN_TOKEN}, "webhooks": LOOPBACK, "routing": {"retries": 0}}
    with caplog.at_level(logging.DEBUG), watching("gateway_kit.webhooks", Watch()):
        async with provisioned("scale", real_clock=True, **config) as env:
            made = await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/keys",
                json={"name": "ci"},
                headers=env.auth(),
            )
            new_key = made.json()["key"]
            hook = await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/webhooks",
                json={"name": "ops", "url": url, "secret": HOOK_SECRET},
                headers=env.auth(),
            )
            assert hook.status == 201
            await env.chat()
            await env.chat(new_key, stream=True)
            await env.chat(key=new_key + "x")  # a wrong key: 401
            env.upstream.status = 500
            await env.chat()  # an upstream failure: warning
            operator = {"authorization": f"Bearer {ADMIN_TOKEN}"}
            await env.recorder.request("GET", "/api/v1/admin/workspaces", headers=operator)
            # A key rotation publishes an event the failing webhook is sent.
            key_id = made.json()["key_id"]
            await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/keys/{key_id}/rotate",
                headers=env.auth(),
            )
            with anyio.fail_after(10):
                await attempt_logged.wait()
            await env.gateway.requests.flush()
    # What the gateway writes: its loggers (`gateway-kit serve` writes these and uvicorn's; a
    # host application decides about httpx's own lines, which name URLs).
    ours = [r for r in caplog.records if r.name.startswith(("gateway_kit", "uvicorn"))]
    written = every_rendering(ours)
    assert "gateway_kit.requests" in written
    for secret in (env.key, new_key, HOOK_SECRET, ADMIN_TOKEN, new_key[:20]):
        assert secret not in written
    failures = [r for r in caplog.records if r.name == "gateway_kit.webhooks"]
    assert any(
        r.levelname == "WARNING" and "failed: status 500" in r.getMessage() for r in failures
    )
    assert url not in written  # the URL may hold a token: never logged


async def test_a_request_line_in_json_carries_its_record(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gateway_kit.requests"):
        async with provisioned("scale") as env:
            answered = await env.chat()
    [line] = [r for r in caplog.records if r.name == "gateway_kit.requests"]
    assert line.levelname == "INFO"
    parsed = json.loads(JSONFormatter().format(line))
    assert parsed["level"] == "info"
    assert parsed["logger"] == "gateway_kit.requests"
    assert parsed["request"]["id"] == answered.headers["x-request-id"]
    assert parsed["request"]["status"] == 200
    assert parsed["message"].startswith(answered.headers["x-request-id"])


async def test_a_model_name_with_control_characters_forges_no_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The requested model is the client's text: a newline in it once wrote a second, forged
    line into the log, and an escape sequence reached the operator's terminal."""
    forged = "nope\n2026-11-27 15:00:00,000 ERROR gateway_kit: FORGED\x1b[2J\x07"
    with caplog.at_level(logging.INFO, logger="gateway_kit.requests"):
        async with provisioned("scale") as env:
            refused = await env.chat(model=forged)
    assert refused.status == 404
    [line] = [r for r in caplog.records if r.name == "gateway_kit.requests"]
    text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(line)
    assert "\n" not in text
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "nope\\n2026-11-27" in text
    assert "\\x1b[2J\\x07" in text


async def test_request_lines_can_be_turned_off_but_failures_still_show(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway_kit.requests"):
        async with provisioned("scale", logs={"requests": False}, routing={"retries": 0}) as env:
            await env.chat()
            env.upstream.status = 503
            await env.chat()
    lines = [r for r in caplog.records if r.name == "gateway_kit.requests"]
    assert [r.levelname for r in lines] == ["WARNING"]


def test_the_serve_logging_config_leaves_inference_access_lines_to_the_request_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logging.config.dictConfig(logging_config(LogsConfig(format="json"), "info"))
    try:
        access = logging.getLogger("uvicorn.access")
        fmt = '%s - "%s %s HTTP/%s" %d'
        access.info(fmt, "127.0.0.1:1", "POST", "/v1/chat/completions", "1.1", 200)
        access.info(fmt, "127.0.0.1:1", "GET", "/v1/me", "1.1", 200)
        logging.getLogger("gateway_kit.requests").info("a request line")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
        assert [(line["logger"], line["message"]) for line in lines] == [
            ("uvicorn.access", '127.0.0.1:1 - "GET /v1/me HTTP/1.1" 200'),
            ("gateway_kit.requests", "a request line"),
        ]
    finally:
        for name in ("gateway_kit", "uvicorn", "uvicorn.access"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
