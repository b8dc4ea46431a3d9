"""The SSRF guard for customer webhook URLs (DESIGN.md section 5).

    guard = SSRFGuard()                      # https only, public addresses only
    await guard.check(url)                   # at create, update and test: UnsafeURLError
    async with guarded_client(guard) as client:
        await client.post(url, content=body)  # every attempt: re-vetted and pinned

A URL passes when its scheme is https (http only with ``allow_http``), it carries no user name
or password, and every address its host resolves to is public. ``guarded_client`` re-resolves
and re-checks the host on each new connection and connects to the vetted address itself, so a
DNS answer that changes between the check and the connection (rebinding) cannot reach an
internal address. TLS still verifies the host name (SNI) and the Host header is unchanged.
Redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore
import httpx

from gateway_kit.config.webhooks import parse_allow_entry
from gateway_kit.exceptions import UnsafeURLError

__all__ = [
    "Resolver",
    "SSRFGuard",
    "VettedTarget",
    "forbidden_reason",
    "guarded_client",
    "guarded_transport",
    "static_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``async (host) -> addresses``: getaddrinfo semantics, ``OSError`` when the host is unknown.
Resolver = Callable[[str], Awaitable[Sequence[str]]]

MAX_URL_LENGTH = 2048
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
_DEFAULT_PORTS = {"https": 443, "http": 80}
# What inet_aton (and so getaddrinfo) reads as an IPv4 address: 2130706433, 0x7f.1, 0177.0.0.1.
_LEGACY_IPV4 = re.compile(r"[0-9a-fA-FxX.]+")


def _table(*rows: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network, str], ...]:
    return tuple((ipaddress.IPv4Network(cidr), reason) for cidr, reason in rows)


def _table6(*rows: tuple[str, str]) -> tuple[tuple[ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.IPv6Network(cidr), reason) for cidr, reason in rows)


_PRIVATE = "a private address (RFC 1918)"
_DOCUMENTATION = "a documentation address"
# Explicit rather than ``is_global`` alone: that property differs between Python versions and
# calls multicast global. ``is_global`` still backs these tables up for anything they miss.
_FORBIDDEN_V4 = _table(
    ("0.0.0.0/8", 'an unspecified ("this network") address'),
    ("10.0.0.0/8", _PRIVATE),
    ("100.64.0.0/10", "a carrier-grade NAT address (RFC 6598)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata services live here)"),
    ("172.16.0.0/12", _PRIVATE),
    ("192.0.0.0/24", "an IETF protocol assignment (RFC 6890)"),
    ("192.0.2.0/24", _DOCUMENTATION),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", _PRIVATE),
    ("198.18.0.0/15", "a benchmarking address (RFC 2544)"),
    ("198.51.100.0/24", _DOCUMENTATION),
    ("203.0.113.0/24", _DOCUMENTATION),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
)
_FORBIDDEN_V6 = _table6(
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("100::/64", "a discard-only address (RFC 6666)"),
    ("64:ff9b:1::/48", "a local-use NAT64 address (RFC 8215)"),
    ("2001::/32", "a Teredo tunnel address"),
    ("2001:2::/48", "a benchmarking address (RFC 5180)"),
    ("2001:db8::/32", _DOCUMENTATION),
    ("3fff::/20", _DOCUMENTATION),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 form stands for, and the form's name."""
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return "an IPv4-mapped form", address.ipv4_mapped
    if address in _TRANSLATED:
        return "an IPv4-translated form", low32
    if address in _NAT64:
        return "a NAT64 form", low32
    if address.sixtofour is not None:
        return "a 6to4 form", address.sixtofour
    if address in _COMPATIBLE:
        return "an IPv4-compatible form", low32
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why webhooks may not target ``address``, or ``None`` when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        for network6, reason in _FORBIDDEN_V6:
            if address in network6:
                return reason
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            form, ipv4 = embedded
            inner = forbidden_reason(ipv4)
            return None if inner is None else f"{form} of {ipv4}, {inner}"
    else:
        for network4, reason in _FORBIDDEN_V4:
            if address in network4:
                return reason
    if not address.is_global:
        return "a reserved address (not globally routable)"
    return None


def _literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is one, in any form getaddrinfo accepts."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


async def _system_resolver(host: str) -> list[str]:
    infos = await anyio.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def static_resolver(table: Mapping[str, Sequence[str]]) -> Resolver:
    """A resolver answering from ``table`` (host -> addresses), for tests: no DNS."""

    async def resolve(host: str) -> Sequence[str]:
        try:
            return table[host]
        except KeyError:
            raise socket.gaierror(socket.EAI_NONAME, f"unknown host {host}") from None

    return resolve


@dataclass(frozen=True, slots=True)
class VettedTarget:
    """A URL that passed the guard, and the addresses it resolved to when checked."""

    url: str
    scheme: str
    #: ASCII (IDNA) form, as connections use it.
    host: str
    port: int
    #: Path and query.
    path: str
    addresses: tuple[str, ...]


class SSRFGuard:
    """Decides which webhook URLs and addresses may be reached.

    ``allow`` is the operator's allow-list: CIDRs (``127.0.0.0/8``, ``::1/128``) whose
    addresses pass, and exact host names whose addresses all pass (as ``webhooks.allow``
    checks them; a bad entry raises ``ValueError``). ``allow_http`` admits
    ``http://`` URLs (addresses are still checked). ``resolver`` replaces DNS (tests).
    """

    def __init__(
        self,
        *,
        allow_http: bool = False,
        allow: Iterable[str] = (),
        resolver: Resolver | None = None,
        resolve_timeout: float = 5.0,
    ) -> None:
        self.allow_http = allow_http
        self.resolve_timeout = resolve_timeout
        self._resolver = resolver or _system_resolver
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        names: set[str] = set()
        for index, entry in enumerate(allow):
            # The configuration has checked these already (webhooks.allow); entries given
            # in code are checked here, by the same rules.
            try:
                parsed = parse_allow_entry(entry)
            except ValueError as exc:
                raise ValueError(f"allow[{index}]: {exc}") from None
            if isinstance(parsed, str):
                names.add(parsed)
            else:
                networks.append(parsed)
        self._allowed_networks = tuple(networks)
        self._allowed_names = frozenset(names)

    async def check(self, url: str) -> VettedTarget:
        """Vet ``url`` as a webhook target; raises ``UnsafeURLError`` saying why not."""
        if not isinstance(url, str) or not url.strip():
            raise UnsafeURLError("the URL is empty")
        if len(url) > MAX_URL_LENGTH:
            raise UnsafeURLError(f"the URL is longer than {MAX_URL_LENGTH} characters")
        try:
            parsed = httpx.URL(url.strip())
        except httpx.InvalidURL as exc:
            raise UnsafeURLError(f"not a valid URL: {exc}") from None
        if not parsed.scheme:
            raise UnsafeURLError("not a valid URL: an absolute https:// URL is required")
        if parsed.scheme != "https" and not (parsed.scheme == "http" and self.allow_http):
            allowed = "http or https" if self.allow_http else "https"
            raise UnsafeURLError(f"the URL scheme must be {allowed}, not {parsed.scheme}")
        if parsed.userinfo:
            raise UnsafeURLError("the URL must not contain a user name or password")
        # The raw (ASCII, IDNA) host: exactly what the HTTP client will connect to.
        host = parsed.raw_host.decode("ascii")
        if not host:
            raise UnsafeURLError("the URL has no host")
        port = _DEFAULT_PORTS[parsed.scheme] if parsed.port is None else parsed.port
        if not 0 < port < 65536:
            raise UnsafeURLError(f"the URL port {port} is out of range")
        return VettedTarget(
            url=str(parsed),
            scheme=parsed.scheme,
            host=host,
            port=port,
            path=parsed.raw_path.decode("ascii"),
            addresses=await self.vet_host(host),
        )

    async def vet_host(self, host: str) -> tuple[str, ...]:
        """Resolve ``host`` and check every address; all must pass (raises ``UnsafeURLError``)."""
        literal = _literal_address(host)
        addresses = [literal] if literal is not None else await self._resolve(host)
        name_allowed = literal is None and _normal_host(host) in self._allowed_names
        for address in addresses:
            reason = None if name_allowed else self._problem(address)
            if reason is not None:
                if literal is not None:
                    # Odd numeric forms (2130706433, 0x7f.1) are named with what they mean.
                    shown = host if host == str(literal) else f"{host} ({literal})"
                    raise UnsafeURLError(f"{shown} is {reason}")
                raise UnsafeURLError(f"host {host!r} resolves to {address}, {reason}")
        return tuple(dict.fromkeys(str(address) for address in addresses))

    def _problem(self, address: IPAddress) -> str | None:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        for candidate in (address, mapped):
            if candidate is not None and any(
                candidate in network
                for network in self._allowed_networks
                if network.version == candidate.version
            ):
                return None
        return forbidden_reason(address)

    async def _resolve(self, host: str) -> list[IPAddress]:
        try:
            with anyio.fail_after(self.resolve_timeout):
                answers = await self._resolver(host)
            addresses = [ipaddress.ip_address(answer) for answer in answers]
        except TimeoutError:
            raise UnsafeURLError(
                f"host {host!r} did not resolve within {self.resolve_timeout:g} s"
            ) from None
        except (OSError, UnicodeError, ValueError):
            raise UnsafeURLError(f"host {host!r} does not resolve") from None
        if not addresses:
            raise UnsafeURLError(f"host {host!r} does not resolve")
        return addresses


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


# -- pinned connections -------------------------------------------------------------------------


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the guard vets at connect time (never to the name).

    The ``timeout`` parameters are httpcore's interface (hence the ``noqa``).
    """

    def __init__(self, guard: SSRFGuard, inner: httpcore.AsyncNetworkBackend) -> None:
        self._guard = guard
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        deadline = None if timeout is None else anyio.current_time() + timeout
        try:
            with anyio.fail_after(timeout):
                addresses = await self._guard.vet_host(host)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from None
        except UnsafeURLError as exc:
            # httpx turns this into httpx.ConnectError with the same message.
            raise httpcore.ConnectError(f"blocked by the SSRF guard: {exc}") from exc
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            remaining = None if deadline is None else deadline - anyio.current_time()
            if remaining is not None and remaining <= 0:
                raise httpcore.ConnectTimeout(f"connecting to {host} timed out")
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=remaining,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None  # vet_host never returns an empty tuple
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("blocked by the SSRF guard: Unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self,
        guard: SSRFGuard,
        *,
        verify: ssl.SSLContext | str | bool,
        limits: httpx.Limits,
        network_backend: httpcore.AsyncNetworkBackend | None,
    ) -> None:
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        # httpx has no option for a network backend, so the pool it built is replaced by one
        # with the same settings whose connections go through the guard.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(guard, network_backend or httpcore.AnyIOBackend()),
        )


def guarded_transport(
    guard: SSRFGuard,
    *,
    verify: ssl.SSLContext | str | bool = True,
    limits: httpx.Limits = DEFAULT_LIMITS,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
) -> httpx.AsyncBaseTransport:
    """An httpx transport whose every new connection is vetted by ``guard`` and pinned.

    ``verify`` is httpx's (``True``, a CA bundle path or an ``ssl.SSLContext``). Environment
    proxies are never used (a proxy would make the connection, unvetted).
    ``network_backend`` replaces the socket layer under the guard (tests).
    """
    return _GuardedTransport(guard, verify=verify, limits=limits, network_backend=network_backend)


def guarded_client(
    guard: SSRFGuard,
    *,
    timeout: float = 5.0,
    verify: ssl.SSLContext | str | bool = True,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
) -> httpx.AsyncClient:
    """The webhook delivery client: guarded transport, no redirects, no proxies, 5 s timeouts.

    ``timeout`` applies to each phase (connect, read, write) as httpx's does; the emitter
    bounds a whole attempt itself.
    """
    return httpx.AsyncClient(
        transport=guarded_transport(guard, verify=verify, network_backend=network_backend),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )
