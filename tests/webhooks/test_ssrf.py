"""The SSRF guard: refused and accepted URLs, and connections pinned to vetted addresses."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import anyio
import httpcore
import httpx
import pytest

from gateway_kit import UnsafeURLError
from gateway_kit._asgi import Receive, Scope, Send
from gateway_kit.testing import run_server
from gateway_kit.webhooks import (
    SSRFGuard,
    VettedTarget,
    forbidden_reason,
    guarded_client,
    static_resolver,
)
from gateway_kit.webhooks.ssrf import _system_resolver

pytestmark = pytest.mark.anyio

PUBLIC = "93.184.216.34"
PUBLIC6 = "2606:4700::1111"
DNS = static_resolver(
    {
        "example.com": [PUBLIC],
        "six.example.com": [PUBLIC6],
        "xn--mnchen-3ya.example": [PUBLIC],
        "localhost.test": ["127.0.0.1"],
        "mixed.test": [PUBLIC, "10.0.0.1"],
        "hooks.internal": ["10.0.0.5"],
        "other.internal": ["10.0.0.5"],
        "garbage.test": ["not-an-address"],
        "empty.test": [],
    }
)

REFUSED = [
    ("http://example.com", "scheme must be https, not http"),
    ("ftp://example.com/", "scheme must be https, not ftp"),
    ("https://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address"),
    ("https://10.0.0.1/", r"10\.0\.0\.1 is a private address"),
    ("https://[::1]/", "::1 is a loopback address"),
    ("https://[::ffff:127.0.0.1]/", "IPv4-mapped form of 127.0.0.1, a loopback address"),
    ("https://localhost.test/", "'localhost.test' resolves to 127.0.0.1, a loopback address"),
    ("https://0.0.0.0/", "unspecified"),
    ("https://100.64.1.1/", "carrier-grade NAT"),
    ("https://[fe80::1]/", "fe80::1 is a link-local address"),
    ("https://user:pw@example.com/", "must not contain a user name or password"),
    ("https://user@example.com/", "must not contain a user name or password"),
    ("not a url", "not a valid URL"),
    ("//example.com/hook", "not a valid URL"),
    ("https:///nohost", "has no host"),
    ("https://mixed.test/", "'mixed.test' resolves to 10.0.0.1, a private address"),
    ("https://2130706433/", r"2130706433 \(127\.0\.0\.1\) is a loopback address"),
    ("https://0x7f.1/", r"0x7f\.1 \(127\.0\.0\.1\) is a loopback address"),
    ("https://0x7f000001/", r"\(127\.0\.0\.1\) is a loopback address"),
    ("https://127.1/", r"\(127\.0\.0\.1\) is a loopback address"),
    ("https://0177.0.0.1/", "not a valid URL"),
    ("https://[64:ff9b::a9fe:a9fe]/", "NAT64 form of 169.254.169.254, a link-local"),
    ("https://[2002:a00:1::1]/", "6to4 form of 10.0.0.1, a private"),
    ("https://[::a00:1]/", "IPv4-compatible form of 10.0.0.1, a private"),
    ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "Teredo"),
    ("https://[fd00::1]/", "unique local"),
    ("https://[ff02::1]/", "multicast"),
    ("https://224.0.0.1/", "multicast"),
    ("https://255.255.255.255/", "broadcast"),
    ("https://192.0.2.1/", "documentation"),
    ("https://[2001:db8::1]/", "documentation"),
    ("https://198.18.0.1/", "benchmarking"),
    ("https://unknown.test/", "'unknown.test' does not resolve"),
    ("https://garbage.test/", "does not resolve"),
    ("https://empty.test/", "does not resolve"),
    ("https://example.com:0/", "port 0 is out of range"),
    ("https://example.com:99999/", "port 99999 is out of range"),
    ("  ", "empty"),
    ("https://example.com/" + "a" * 3000, "longer than 2048"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED)
async def test_refused_urls_say_why(url: str, reason: str) -> None:
    with pytest.raises(UnsafeURLError, match=reason):
        await SSRFGuard(resolver=DNS).check(url)


async def test_a_public_target_is_accepted_with_its_addresses() -> None:
    target = await SSRFGuard(resolver=DNS).check("https://example.com/hooks/in?x=1")
    assert target == VettedTarget(
        url="https://example.com/hooks/in?x=1",
        scheme="https",
        host="example.com",
        port=443,
        path="/hooks/in?x=1",
        addresses=(PUBLIC,),
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://six.example.com:8443/",
        "https://8.8.8.8/",
        f"https://[{PUBLIC6}]/",
        "https://[::ffff:8.8.8.8]/",
        "https://münchen.example/",
    ],
)
async def test_public_targets_are_accepted(url: str) -> None:
    target = await SSRFGuard(resolver=DNS).check(url)
    assert target.addresses
    assert all(
        forbidden_reason(__import__("ipaddress").ip_address(a)) is None for a in target.addresses
    )


async def test_the_allow_list_admits_loopback_receivers_only() -> None:
    guard = SSRFGuard(allow=["127.0.0.0/8", "::1/128"], resolver=DNS)
    assert (await guard.check("https://localhost.test:8443/")).addresses == ("127.0.0.1",)
    assert (await guard.check("https://[::1]/")).addresses == ("::1",)
    assert (await guard.check("https://[::ffff:127.0.0.1]/")).addresses == ("::ffff:7f00:1",)
    with pytest.raises(UnsafeURLError, match="private"):
        await guard.check("https://10.0.0.1/")


async def test_an_allowed_host_name_passes_whatever_it_resolves_to() -> None:
    guard = SSRFGuard(allow=["Hooks.Internal."], resolver=DNS)
    assert (await guard.check("https://hooks.internal/")).addresses == ("10.0.0.5",)
    with pytest.raises(UnsafeURLError, match=r"'other\.internal' resolves to 10\.0\.0\.5"):
        await guard.check("https://other.internal/")


def test_bad_allow_list_entries_are_configuration_errors() -> None:
    with pytest.raises(ValueError, match="neither a CIDR nor a host name"):
        SSRFGuard(allow=["10.0.0.0/8", "not a host!"])


async def test_allow_http_admits_http_but_still_checks_addresses() -> None:
    guard = SSRFGuard(allow_http=True, resolver=DNS)
    assert (await guard.check("http://example.com/")).port == 80
    with pytest.raises(UnsafeURLError, match="private"):
        await guard.check("http://10.0.0.1/")


async def test_a_resolver_that_fails_or_hangs_is_refused() -> None:
    async def failing(host: str) -> Sequence[str]:
        raise OSError("resolver exploded")

    async def hanging(host: str) -> Sequence[str]:
        await anyio.sleep_forever()
        raise AssertionError

    with pytest.raises(UnsafeURLError, match="does not resolve"):
        await SSRFGuard(resolver=failing).check("https://example.com/")
    with pytest.raises(UnsafeURLError, match=r"did not resolve within 0\.05 s"):
        await SSRFGuard(resolver=hanging, resolve_timeout=0.05).check("https://example.com/")


async def test_the_system_resolver_returns_addresses() -> None:
    # A numeric host: getaddrinfo answers without DNS.
    assert await _system_resolver("127.0.0.1") == ["127.0.0.1"]


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", PUBLIC6, "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"],
)
def test_public_addresses_have_no_reason(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


# -- pinning, with a recording socket layer -----------------------------------------------------


class RecordingStream(httpcore.AsyncNetworkStream):
    # The timeout parameters are httpcore's interface (hence the noqa comments).

    def __init__(self, backend: RecordingBackend) -> None:
        self.backend = backend
        self.answered = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if self.answered:
            return b""
        self.answered = True
        return b"HTTP/1.1 204 No Content\r\n\r\n"

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self.backend.written += buffer

    async def aclose(self) -> None:
        pass

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        self.backend.tls_names.append(server_hostname)
        return self


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Records where connections go and what TLS is told; refuses the ``refuse`` addresses."""

    def __init__(self, refuse: Iterable[str] = ()) -> None:
        self.refuse = set(refuse)
        self.connects: list[tuple[str, int]] = []
        self.tls_names: list[str | None] = []
        self.written = bytearray()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        if host in self.refuse:
            raise httpcore.ConnectError(f"{host} refused")
        return RecordingStream(self)


async def test_the_socket_goes_to_the_vetted_address_and_tls_to_the_name() -> None:
    backend = RecordingBackend()
    async with guarded_client(SSRFGuard(resolver=DNS), network_backend=backend) as client:
        response = await client.post("https://example.com/in?x=1", content=b"{}")
    assert response.status_code == 204
    assert backend.connects == [(PUBLIC, 443)]
    assert backend.tls_names == ["example.com"]
    assert bytes(backend.written).startswith(b"POST /in?x=1 HTTP/1.1\r\nHost: example.com\r\n")


async def test_the_next_vetted_address_is_tried_when_one_refuses() -> None:
    backend = RecordingBackend(refuse=[PUBLIC])
    guard = SSRFGuard(resolver=static_resolver({"two.example.com": [PUBLIC, "8.8.8.8"]}))
    async with guarded_client(guard, network_backend=backend) as client:
        response = await client.get("https://two.example.com/")
    assert response.status_code == 204
    assert backend.connects == [(PUBLIC, 443), ("8.8.8.8", 443)]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://10.0.0.1/", "10.0.0.1 is a private address"),
        ("https://mixed.test/", "'mixed.test' resolves to 10.0.0.1"),
        ("https://unknown.test/", "does not resolve"),
    ],
)
async def test_unsafe_connections_fail_before_any_socket_opens(url: str, reason: str) -> None:
    backend = RecordingBackend()
    async with guarded_client(SSRFGuard(resolver=DNS), network_backend=backend) as client:
        with pytest.raises(httpx.ConnectError, match=f"blocked by the SSRF guard: .*{reason}"):
            await client.get(url)
    assert backend.connects == []


async def test_a_hanging_resolver_at_connect_is_a_connect_timeout() -> None:
    async def hanging(host: str) -> Sequence[str]:
        await anyio.sleep_forever()
        raise AssertionError

    backend = RecordingBackend()
    guard = SSRFGuard(resolver=hanging)
    async with guarded_client(guard, timeout=0.05, network_backend=backend) as client:
        with pytest.raises(httpx.ConnectTimeout):
            await client.get("https://example.com/")
    assert backend.connects == []


def test_the_delivery_client_defaults() -> None:
    client = guarded_client(SSRFGuard())
    assert client.timeout == httpx.Timeout(5.0)
    assert client.follow_redirects is False
    assert client.trust_env is False


# -- pinning end to end, on loopback ------------------------------------------------------------


class Receiver:
    """A raw ASGI webhook receiver: echoes request headers, ``/redirect`` answers 302,
    ``/slow`` answers only once ``release`` is set."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.release = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        self.paths.append(scope["path"])
        if scope["path"] == "/slow":
            # The test sets a threading.Event from its own thread; wait for it off the loop.
            await anyio.to_thread.run_sync(self.release.wait)
        status, extra = (
            (302, [(b"location", b"/hook")]) if scope["path"] == "/redirect" else (200, [])
        )
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(headers).encode()})


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[Receiver, int]]:
    app = Receiver()
    with run_server(app, lifespan="off") as base_url:
        yield app, int(base_url.rsplit(":", 1)[1])


LOOPBACK = SSRFGuard(
    allow_http=True,
    allow=["127.0.0.0/8"],
    resolver=static_resolver({"hooks.test": ["127.0.0.1"]}),
)


class Rebinding:
    """A DNS answer that changes after the first lookup (a DNS rebinding attack)."""

    def __init__(self, first: list[str], then: list[str]) -> None:
        self.answers = [first, then]
        self.calls = 0

    async def __call__(self, host: str) -> Sequence[str]:
        self.calls += 1
        return self.answers[min(self.calls, 2) - 1]


@pytest.mark.slow
async def test_the_receiver_sees_the_original_host_header(
    receiver: tuple[Receiver, int],
) -> None:
    _, port = receiver
    async with guarded_client(LOOPBACK) as client:
        response = await client.post(f"http://hooks.test:{port}/hook", content=b"{}")
    assert response.status_code == 200
    assert response.json()["host"] == f"hooks.test:{port}"


@pytest.mark.slow
async def test_dns_rebinding_after_the_check_is_refused_at_connect(
    receiver: tuple[Receiver, int],
) -> None:
    app, port = receiver
    resolver = Rebinding([PUBLIC], ["127.0.0.1"])
    guard = SSRFGuard(allow_http=True, resolver=resolver)
    url = f"http://hooks.test:{port}/hook"
    assert (await guard.check(url)).addresses == (PUBLIC,)
    before = len(app.paths)
    async with guarded_client(guard) as client:
        with pytest.raises(
            httpx.ConnectError, match=r"resolves to 127\.0\.0\.1, a loopback address"
        ):
            await client.post(url, content=b"{}")
    assert resolver.calls == 2
    assert len(app.paths) == before


@pytest.mark.slow
async def test_redirects_are_not_followed(receiver: tuple[Receiver, int]) -> None:
    app, port = receiver
    before = len(app.paths)
    async with guarded_client(LOOPBACK) as client:
        response = await client.post(f"http://hooks.test:{port}/redirect", content=b"{}")
    assert response.status_code == 302
    assert app.paths[before:] == ["/redirect"]


@pytest.mark.slow
async def test_a_receiver_slower_than_the_timeout_times_out(
    receiver: tuple[Receiver, int],
) -> None:
    app, port = receiver
    try:
        async with guarded_client(LOOPBACK, timeout=0.2) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(f"http://hooks.test:{port}/slow", content=b"{}")
    finally:
        app.release.set()
