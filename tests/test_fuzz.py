"""Hostile bodies on every JSON route of ``create_app``: never a 5xx, every 4xx in the OpenAI
error shape, nothing logged at ERROR.

The routes are discovered by walking the app (``Route`` and ``Mount``, recursively): every
route taking ``POST``, ``PATCH`` or ``PUT`` gets every case of ``TestHostileBodies``, its path
parameters filled with real ids and its caller authenticated as the route wants (a workspace
key, the operator's token, a Stripe signature), so each body reaches the handler. A route added
later inherits all of it; ``SAMPLES`` gives each route a realistic body whose every position
the per-field cases mutate (a route without one gets ``GENERIC`` and a failing reminder).

The cases: nesting 5,000 levels deep (arrays, objects, both), past the depth limit and below
Python's; a lone surrogate in every string (values and keys); integers past int64 and past a
double; ``NaN``, ``Infinity`` and ``1e400``; every position of the sample replaced by each
wrong type; empty and degenerate bodies; 50 MB with a content-length, chunked, and under a
lying content-length; odd content types; bodies that are not UTF-8. In process through
``httpx.ASGITransport``; the 50 MB cases also once over a real uvicorn on loopback.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route

from gateway_kit import GatewayConfig, create_app
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.bench.proxy import GUARDIAN_FAR_ABOVE_THE_LOAD
from gateway_kit.gateway import Gateway
from gateway_kit.payments import sign_stripe_payload
from gateway_kit.testing import run_server
from tests.fakes import provisioned
from tests.servers import free_port

pytestmark = pytest.mark.anyio

TOKEN = "operator-" + "f" * 32
STRIPE_SECRET = "whsec_fuzz" + "s" * 30
WEBHOOK_SECRET = "whsec_" + "w" * 40
STRIPE_PATH = "/v1/payments/stripe"
ADMIN_PREFIX = "/api/v1/admin"
JSON_METHODS = frozenset({"POST", "PATCH", "PUT"})
MB = 1024 * 1024
HUGE = 50 * MB

FREE = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "2"}
CONFIG: dict[str, Any] = {
    "providers": [{"name": "mock", "type": "mock"}],
    "models": [
        {"name": "gpt-fake", "provider": "mock", "price": FREE},
        {"name": "embed", "provider": "mock", "kind": "embedding", "price": FREE},
    ],
    # Room for every request the fuzz makes, and a cap, so the budget prices each one.
    "plans": {"fuzz": {"included_requests": 10**6, "burst_limit_rpm": 10**6, "budget_usd": "1000"}},
    "default_plan": "fuzz",
    # Every layer that reads the body is on (Guardian evaluating each rule, refusing none):
    # a wrong type in a message was a 500 in Guardian that a fuzz with it off never saw.
    "guardian": GUARDIAN_FAR_ABOVE_THE_LOAD,
    "pii": {"mode": "enforce"},
    "cache": {"mode": "enforce"},
    "admin": {"token": TOKEN},
    "payments": {"stripe_webhook_secret": STRIPE_SECRET},
    # Webhook tests go to a closed loopback port: refused at once, no network.
    "webhooks": {"worker": False, "allow_http": True, "allow": ["127.0.0.0/8"], "timeout_s": 2},
}


# -- the routes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonRoute:
    method: str
    #: The path template, e.g. ``/api/v1/workspaces/{workspace_id}/keys``.
    path: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def json_routes(routes: Any, prefix: str = "") -> list[JsonRoute]:
    """Every (method, path) of ``routes`` taking a JSON body, mounts followed."""
    found: list[JsonRoute] = []
    for route in routes:
        if isinstance(route, Mount):
            found += json_routes(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            for method in sorted((route.methods or set()) & JSON_METHODS):
                found.append(JsonRoute(method, prefix + route.path))
    return found


JSON_ROUTES = json_routes(create_app(GatewayConfig.model_validate(CONFIG)).routes)


# -- realistic bodies: every position of one is mutated by the per-field cases ------------------

#: Placeholders, replaced by real values of the test's workspace (in keys and values).
KEY_ID, WEBHOOK_URL, WORKSPACE_ID = "{key_id}", "{webhook_url}", "{workspace_id}"

_WEBHOOK = {
    "name": "fuzz",
    "url": WEBHOOK_URL,
    "secret": WEBHOOK_SECRET,
    "events": ["budget.alert", "key.rotated"],
}
_BUDGET = {"cap_usd": 50, "key_caps": {KEY_ID: 5.5}}
_PII = {"patterns": {"ACME_ID": "ACME-\\d+"}, "allow": ["help@acme.example"]}
_GUARDIAN = {
    "key_rules": {KEY_ID: {"repeat": {"block_at": 30, "window_s": 120.5}}},
    "allow": {KEY_ID: ["tool_loop", "context_size"]},
}
_WS = "/api/v1/workspaces/{workspace_id}"
_ADMIN_WS = ADMIN_PREFIX + "/workspaces/{workspace_id}"

SAMPLES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/chat/completions"): {
        "model": "gpt-fake",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "ann@example.com"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        ],
        "max_tokens": 16,
        "n": 2,
        "temperature": 0.5,
        "top_p": 1,
        "stream": False,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
        "user": "user-1",
    },
    ("POST", "/v1/embeddings"): {
        "model": "embed",
        "input": ["hello", "world"],
        "dimensions": 8,
        "encoding_format": "float",
    },
    ("POST", _WS + "/keys"): {"name": "fuzz", "role": "inference"},
    ("POST", _WS + "/keys/{key_id}/rotate"): {"grace_period_s": 60},
    ("POST", _WS + "/webhooks"): _WEBHOOK,
    ("PATCH", _WS + "/webhooks/{webhook_id}"): {**_WEBHOOK, "status": "active"},
    ("POST", _WS + "/webhooks/{webhook_id}/test"): {"event": "budget.alert"},
    ("POST", _WS + "/webhooks/{webhook_id}/replay"): {"since": "2026-11-01T00:00:00Z"},
    ("PATCH", _WS + "/budget"): _BUDGET,
    ("PATCH", _WS + "/guardian"): _GUARDIAN,
    ("PATCH", _WS + "/pii"): _PII,
    ("PATCH", _WS + "/cache"): {"semantic": False},
    ("POST", ADMIN_PREFIX + "/workspaces"): {
        "email": "fuzz@example.com",
        "plan": "fuzz",
        "with_key": True,
    },
    ("PATCH", _ADMIN_WS): {"plan": "fuzz", "email": "team@example.com", "status": "active"},
    ("PATCH", _ADMIN_WS + "/budget"): _BUDGET,
    ("PATCH", _ADMIN_WS + "/guardian"): _GUARDIAN,
    ("PATCH", _ADMIN_WS + "/pii"): _PII,
    ("PATCH", _ADMIN_WS + "/cache"): {"semantic": False},
    ("POST", _ADMIN_WS + "/keys"): {"name": "fuzz", "role": "inference"},
    ("PATCH", _ADMIN_WS + "/wallet"): {"billing": False},
    ("POST", _ADMIN_WS + "/wallet/topups"): {
        "amount_usd": 5,
        "reference": "fuzz",
        "idempotency_key": "fuzz-1",
    },
    # What the endpoint reads of a Stripe invoice.paid event (tests/payments has whole ones).
    ("POST", STRIPE_PATH): {
        "id": "evt_1SGk3iLkdIwHu7ixR5hY",
        "object": "event",
        "type": "invoice.paid",
        "data": {
            "object": {
                "id": "in_1SGk2hLkdIwHu7ixQq0pTz9a",
                "object": "invoice",
                "amount_paid": 2000,
                "amount_due": 2000,
                "attempt_count": 1,
                "currency": "usd",
                "metadata": {"workspace_id": WORKSPACE_ID},
                "last_finalization_error": {"code": "card_declined"},
            }
        },
    },
}

#: The body of a JSON route ``SAMPLES`` does not know yet.
GENERIC = {"name": "fuzz", "count": 1, "ratio": 0.5, "items": ["a", 1], "nested": {"on": True}}


def sample(route: JsonRoute) -> Any:
    return copy.deepcopy(SAMPLES.get((route.method, route.path), GENERIC))


# -- the target: a gateway, its workspace, and how to call each route ---------------------------


async def make_key(gateway: Gateway, workspace_id: str) -> str:
    """The workspace key the fuzz calls with: one that may call every route, so that every body
    reaches its handler (the one place to change when the keys' roles change)."""
    made = await gateway.keys.create(workspace_id, name="fuzz", scopes=ROLES["admin"])
    return made.secret


@dataclass
class Target:
    client: httpx.AsyncClient
    clock: Any
    key: str
    ids: dict[str, str]

    def path(self, route: JsonRoute) -> str:
        try:
            return route.path.format(**self.ids)
        except KeyError as missing:
            raise AssertionError(
                f"{route}: a new path parameter {missing}; give Target.ids a real value for it"
            ) from None

    def fill(self, value: Any) -> Any:
        """``value`` with the placeholders replaced (in keys and values)."""
        values = {KEY_ID: self.ids["key_id"], WEBHOOK_URL: self.ids["webhook_url"]}
        values[WORKSPACE_ID] = self.ids["workspace_id"]
        if isinstance(value, dict):
            return {values.get(k, k): self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return values.get(value, value) if isinstance(value, str) else value

    def credentials(self, route: JsonRoute, body: bytes) -> dict[str, str]:
        """What gets ``body`` past the route's authentication to its handler."""
        if route.path == STRIPE_PATH:
            signed = sign_stripe_payload(body, STRIPE_SECRET, timestamp=int(self.clock()))
            return {"stripe-signature": signed}
        if route.path.startswith(ADMIN_PREFIX):
            return {"authorization": f"Bearer {TOKEN}"}
        return {"authorization": f"Bearer {self.key}"}

    async def send(
        self,
        route: JsonRoute,
        body: bytes | Iterator[bytes],
        *,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
        signed: bytes | None = None,
    ) -> httpx.Response:
        """``body`` (bytes, or chunks: sent as they come) to ``route``; ``signed`` is what a
        Stripe signature covers when ``body`` is chunks."""
        whole = body if isinstance(body, bytes) else (signed or b"")
        sent = {**self.credentials(route, whole), **(headers or {})}
        if content_type is not None:
            sent["content-type"] = content_type
        content: Any = body if isinstance(body, bytes) else _chunks(body)
        return await self.client.request(
            route.method, self.path(route), content=content, headers=sent
        )


async def _chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@asynccontextmanager
async def target() -> AsyncIterator[Target]:
    async with provisioned("fuzz", **CONFIG) as env:
        gateway = env.gateway
        victim = await gateway.keys.create(env.workspace_id, name="victim", scopes=ROLES["admin"])
        webhook_url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
        hook = await gateway.webhooks.create(
            env.workspace_id, name="hook", url=webhook_url, secret=WEBHOOK_SECRET, events=None
        )
        transport = httpx.ASGITransport(app=create_app(gateway=gateway), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield Target(
                client,
                env.clock,
                await make_key(gateway, env.workspace_id),
                {
                    "workspace_id": env.workspace_id,
                    "key_id": victim.key.key_id,
                    "webhook_id": hook.id,
                    "webhook_url": webhook_url,
                },
            )


# -- generating bodies --------------------------------------------------------------------------

Path = tuple[Any, ...]


def positions(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every position in ``value``: itself, then each member and item, depth first."""
    yield path
    if isinstance(value, dict):
        for key, member in value.items():
            yield from positions(member, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from positions(item, (*path, index))


def replaced(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(value)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copied


def renamed_keys(value: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """(the object's position, the key) of every member of every object in ``value``."""
    for where in positions(value, path):
        node = value
        for step in where:
            node = node[step]
        if isinstance(node, dict):
            for key in node:
                yield where, key


#: A marker dumped in a position, then replaced by a literal ``json.dumps`` will not write.
_MARK = "\x00fuzz-literal\x00"


def with_literal(value: Any, path: Path, literal: bytes) -> bytes:
    text = json.dumps(replaced(value, path, _MARK)).encode()
    return text.replace(json.dumps(_MARK).encode(), literal, 1)


WRONG_TYPES: list[Any] = ["text", "", 7, -1, 0.5, True, False, None, [], [1, "a"], {}, {"a": 1}]
BIG_INTEGERS = [b"9223372036854775808", b"10000000000000000000", b"-10000000000000000000"]
BIG_INTEGERS.append(b"1" + b"0" * 400)
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"]
SURROGATES = ["\ud800", "\udfff", "x\udbff", "\ude00\ud83d"]  # the last: a pair turned round


def deep_bodies() -> Iterator[tuple[str, bytes]]:
    yield "arrays-5000", b"[" * 5000 + b"]" * 5000
    yield "objects-5000", b'{"a":' * 5000 + b"1" + b"}" * 5000
    yield "mixed-5000", b'[{"a":' * 2500 + b"1" + b"}]" * 2500
    yield "unclosed-60000", b"[" * 60_000  # under the management API's 64 KiB
    # Past the gateway's depth limit but (from a shallow stack) within Python's: json parses
    # them, so only the gateway's own check stands between them and whatever walks the body
    # later from a deeper stack (json.dumps in a layer).
    yield "arrays-900", b"[" * 900 + b"]" * 900
    yield "objects-300", b'{"model":' * 300 + b'"gpt-fake"' + b"}" * 300


# -- what every answer must be ------------------------------------------------------------------


def check(answer: httpx.Response, what: str, *, code: str | None = None) -> None:
    """No 5xx; a 4xx is the OpenAI error shape; ``code``: exactly that 400 error."""
    assert answer.status_code < 500, f"{what}: {answer.status_code} {answer.text[:300]}"
    if answer.status_code >= 400:
        try:
            body = answer.json()
        except ValueError:
            raise AssertionError(f"{what}: a {answer.status_code} that is not JSON") from None
        assert isinstance(body, dict), what
        assert set(body) == {"error"}, f"{what}: {body}"
        error = body["error"]
        assert set(error) == {"message", "type", "code", "param"}, f"{what}: {error}"
        assert isinstance(error["message"], str), what
        assert error["message"], what
        assert isinstance(error["type"], str), what
        assert error["code"] is None or isinstance(error["code"], str), what
        assert error["param"] is None or isinstance(error["param"], str), what
    if code is not None:
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, code), (
            f"{what}: {answer.status_code} {answer.text[:300]}"
        )


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Nothing logged at ERROR or above, by the gateway's loggers or anyone's (the root)."""
    own = logging.getLogger("gateway_kit")
    own.addHandler(caplog.handler)  # should it ever stop propagating to the root
    caplog.set_level(logging.WARNING)
    try:
        yield
    finally:
        own.removeHandler(caplog.handler)
    errors = {id(r): r for r in caplog.records if r.levelno >= logging.ERROR}.values()
    assert not errors, "\n".join(f"{r.name}: {r.getMessage()}\n{r.exc_text or ''}" for r in errors)


ROUTE_IDS = [str(route) for route in JSON_ROUTES]


@pytest.mark.usefixtures("no_errors_logged")
@pytest.mark.parametrize("route", JSON_ROUTES, ids=ROUTE_IDS)
class TestHostileBodies:
    """Each case, on each JSON route the app has."""

    async def test_deep_nesting_is_a_400_invalid_json(self, route: JsonRoute) -> None:
        async with target() as t:
            for label, body in deep_bodies():
                check(await t.send(route, body), f"{route} {label}", code="invalid_json")

    async def test_a_lone_surrogate_in_any_string_is_a_400_invalid_json(
        self, route: JsonRoute
    ) -> None:
        async with target() as t:
            body = t.fill(sample(route))
            strings = [p for p in positions(body) if isinstance(_at(body, p), str)]
            for index, where in enumerate(strings):
                lone = SURROGATES[index % len(SURROGATES)]
                hostile = replaced(body, where, _at(body, where) + lone)
                # json.dumps writes the surrogate as its \\uXXXX escape, as a client would.
                raw = json.dumps(hostile).encode()
                check(await t.send(route, raw), f"{route} {where}", code="invalid_json")
            for where, key in renamed_keys(body):
                node = _at(body, where)
                renamed = {(k + "\udc00" if k == key else k): v for k, v in node.items()}
                raw = json.dumps(replaced(body, where, renamed)).encode()
                check(await t.send(route, raw), f"{route} key {key!r}", code="invalid_json")

    async def test_numbers_past_int64_and_a_double_answer_without_a_server_error(
        self, route: JsonRoute
    ) -> None:
        async with target() as t:
            body = t.fill(sample(route))
            for where in positions(body):
                for literal in BIG_INTEGERS:
                    raw = with_literal(body, where, literal)
                    check(await t.send(route, raw), f"{route} {where} = {literal[:20]!r}")

    async def test_nan_and_infinity_anywhere_are_a_400_invalid_json(self, route: JsonRoute) -> None:
        async with target() as t:
            body = t.fill(sample(route))
            for where in positions(body):
                for literal in NON_FINITE:
                    raw = with_literal(body, where, literal)
                    what = f"{route} {where} = {literal.decode()}"
                    check(await t.send(route, raw), what, code="invalid_json")

    async def test_a_wrong_type_anywhere_answers_without_a_server_error(
        self, route: JsonRoute
    ) -> None:
        async with target() as t:
            body = t.fill(sample(route))
            for where in positions(body):
                for wrong in WRONG_TYPES:
                    if _at(body, where) == wrong and type(_at(body, where)) is type(wrong):
                        continue
                    raw = json.dumps(replaced(body, where, wrong)).encode()
                    check(await t.send(route, raw), f"{route} {where} = {wrong!r}")

    async def test_empty_and_degenerate_bodies(self, route: JsonRoute) -> None:
        async with target() as t:
            for raw in (b"", b" \r\n\t", b"null", b"0", b'""', b"[]", b"{}", b"{", b"}", b"\x00"):
                check(await t.send(route, raw), f"{route} {raw!r}")
            invalid = (b"{", b"}", b"\x00", b"[1,]", b"{'a': 1}", b'{"a" 1}', b"\xef\xbb\xbf")
            for raw in invalid:
                check(await t.send(route, raw), f"{route} {raw!r}", code="invalid_json")

    async def test_50_mb_is_refused_whether_declared_chunked_or_under_a_lying_length(
        self, route: JsonRoute
    ) -> None:
        async with target() as t:
            body = huge_body()
            cases: list[tuple[str, Any, dict[str, str]]] = [
                ("with a content-length", body, {}),
                ("chunked", _split(body), {}),
                ("under a content-length of 2", _split(body), {"content-length": "2"}),
            ]
            for label, content, headers in cases:
                answer = await t.send(route, content, headers=headers, signed=body)
                check(answer, f"{route} 50 MB {label}")
                assert answer.status_code == 413, f"{route} 50 MB {label}: {answer.status_code}"
                assert answer.json()["error"]["code"] == "request_too_large"

    async def test_odd_content_types(self, route: JsonRoute) -> None:
        async with target() as t:
            raw = json.dumps(t.fill(sample(route))).encode()
            for content_type in (
                "text/plain",
                "multipart/form-data; boundary=fuzz",
                "application/x-www-form-urlencoded",
            ):
                answer = await t.send(route, raw, content_type=content_type)
                check(answer, f"{route} {content_type}")
                if route.path != STRIPE_PATH:  # Stripe signs the bytes; their type is moot
                    assert answer.status_code == 415, f"{route} {content_type}"
            for content_type in (
                "application/json; charset=latin-1",
                "application/json; charset=utf-16",
                "application/vnd.api+json",
                "APPLICATION/JSON",
                ";;;",
                "",
                None,
            ):
                check(
                    await t.send(route, raw, content_type=content_type), f"{route} {content_type}"
                )

    async def test_a_compressed_body_is_a_415_naming_the_encoding(self, route: JsonRoute) -> None:
        """Bodies are read as they come: gzip was read as JSON that is not UTF-8, and a plain
        body labelled br was served as if nothing were wrong."""
        async with target() as t:
            raw = json.dumps(t.fill(sample(route))).encode()
            for encoding, body in (("gzip", gzip.compress(raw)), ("br", raw), ("x, gzip", raw)):
                answer = await t.send(route, body, headers={"content-encoding": encoding})
                check(answer, f"{route} {encoding}")
                if route.path != STRIPE_PATH:  # Stripe signs the bytes as they came
                    assert answer.status_code == 415, f"{route} {encoding}"
                    assert repr(encoding) in answer.json()["error"]["message"]
            for identity in ("identity", ""):
                answer = await t.send(route, raw, headers={"content-encoding": identity})
                assert answer.status_code != 415, f"{route} {identity!r}"

    async def test_bodies_that_are_not_utf8_are_a_400_invalid_json(self, route: JsonRoute) -> None:
        async with target() as t:
            body = t.fill(sample(route))
            text = json.dumps(body, ensure_ascii=False)
            cases = {
                "latin-1": json.dumps({**_as_object(body), "é": "café"}, ensure_ascii=False).encode(
                    "latin-1"
                ),
                "utf-16": text.encode("utf-16"),
                "utf-32": text.encode("utf-32"),
                "a stray 0xff": text.encode()[:-1] + b"\xff" + text.encode()[-1:],
                "an encoded surrogate": text.encode()[:-1] + b',"s":"\xed\xa0\x80"}',
                "a truncated sequence": b'{"name": "caf\xc3"}',
            }
            for label, raw in cases.items():
                check(await t.send(route, raw), f"{route} {label}", code="invalid_json")


def test_every_json_route_has_a_realistic_sample() -> None:
    # A new route is fuzzed with GENERIC meanwhile; its own fields only once it has a sample.
    missing = [str(r) for r in JSON_ROUTES if (r.method, r.path) not in SAMPLES]
    assert not missing, f"add a realistic body to SAMPLES in {__file__} for: {missing}"
    stale = sorted(f"{m} {p}" for m, p in SAMPLES if JsonRoute(m, p) not in JSON_ROUTES)
    assert not stale, f"SAMPLES names routes the app no longer has: {stale}"


def test_the_routes_were_found() -> None:
    found = {str(route) for route in JSON_ROUTES}
    for expected in (
        "POST /v1/chat/completions",
        "POST /v1/embeddings",
        "POST /api/v1/workspaces/{workspace_id}/keys",
        "PATCH /api/v1/workspaces/{workspace_id}/budget",
        "POST /api/v1/admin/workspaces",
        "POST /v1/payments/stripe",
    ):
        assert expected in found


def _at(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def _as_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value}


_HUGE: list[bytes] = []


def huge_body() -> bytes:
    """50 MB of valid-looking JSON, built once."""
    if not _HUGE:
        _HUGE.append(b'{"model": "gpt-fake", "padding": "' + b"a" * (HUGE - 40) + b'"}')
    return _HUGE[0]


def _split(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), MB):
        yield body[start : start + MB]


# -- over a real server -------------------------------------------------------------------------


def test_50_mb_declared_and_chunked_over_a_real_server(caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn on loopback: the body arrives as the network delivers it, and the answer comes
    while the client is still sending (the gateway does not read 50 MB to refuse them)."""
    uvicorn_errors = logging.getLogger("uvicorn.error")  # does not propagate to the root
    uvicorn_errors.addHandler(caplog.handler)
    config = {**CONFIG, "storage": {"url": "memory://"}}
    body = huge_body()
    try:
        with (
            run_server(create_app(GatewayConfig.model_validate(config))) as base_url,
            httpx.Client(base_url=base_url, timeout=60) as client,
        ):
            admin = {"authorization": f"Bearer {TOKEN}"}
            made = client.post(
                "/api/v1/admin/workspaces",
                json={"email": "fuzz@example.com", "with_key": True},
                headers=admin,
            ).json()
            workspace_id, key = made["workspace_id"], made["key"]["key"]
            auth = {"authorization": f"Bearer {key}"}
            victim = client.post(
                f"/api/v1/workspaces/{workspace_id}/keys", json={"name": "victim"}, headers=auth
            ).json()
            hook = client.post(
                f"/api/v1/workspaces/{workspace_id}/webhooks",
                json={**_WEBHOOK, "url": f"http://127.0.0.1:{free_port()}/hook"},
                headers=auth,
            ).json()
            ids = {
                "workspace_id": workspace_id,
                "key_id": victim["key_id"],
                "webhook_id": hook["id"],
            }
            for route in JSON_ROUTES:
                path = route.path.format(**ids)
                headers = {"content-type": "application/json"}
                if route.path == STRIPE_PATH:
                    headers["stripe-signature"] = "t=1,v1=" + "0" * 64  # refused by size first
                elif route.path.startswith(ADMIN_PREFIX):
                    headers.update(admin)
                else:
                    headers.update(auth)
                for label, content in (("declared", body), ("chunked", _split(body))):
                    answer = client.request(route.method, path, content=content, headers=headers)
                    check(answer, f"{route} 50 MB {label} over uvicorn")
                    assert answer.status_code == 413, f"{route} {label}: {answer.status_code}"
    finally:
        uvicorn_errors.removeHandler(caplog.handler)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [f"{r.name}: {r.getMessage()}" for r in errors]


def test_the_generators_make_what_they_say() -> None:
    body = {"a": [1, {"b": "c"}]}
    assert list(positions(body)) == [(), ("a",), ("a", 0), ("a", 1), ("a", 1, "b")]
    assert with_literal(body, ("a", 0), b"NaN") == b'{"a": [NaN, {"b": "c"}]}'
    assert json.dumps(replaced(body, ("a", 1, "b"), "x\ud800")) == '{"a": [1, {"b": "x\\ud800"}]}'
    assert list(renamed_keys(body)) == [((), "a"), (("a", 1), "b")]
    assert not math.isfinite(json.loads(b"1e400"))  # what parse_json must refuse
