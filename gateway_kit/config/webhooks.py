"""Webhook delivery: the schedule, the deadline, the SSRF policy and the worker."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

import idna
from pydantic import AfterValidator, Field, model_validator

from gateway_kit.config.base import _Config

__all__ = ["WebhooksConfig", "parse_allow_entry"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def parse_allow_entry(entry: str) -> Network | str:
    """An SSRF allow-list entry: a network (a CIDR or one address) or a host name.

    Host names come back as the guard compares them: lower case, ASCII (IDNA), no final dot.
    A CIDR with host bits set (``10.0.0.1/8``) is refused rather than widened to its network:
    on an allow-list past the SSRF guard, guessing which of the two was meant is unsafe.
    Raises ``ValueError`` saying what is wrong.
    """
    text = entry.strip()
    if not text:
        raise ValueError("an empty entry: give a CIDR (10.0.0.0/8) or a host name")
    try:
        return ipaddress.ip_network(text)
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    else:
        one = ipaddress.ip_network(text.partition("/")[0])
        raise ValueError(
            f"{entry!r} has host bits set: write {loose} for the network, or {one} for the "
            "one address"
        )
    if "://" in text:
        raise ValueError(f"{entry!r}: give the host alone, without a scheme")
    address, slash, _ = text.partition("/")
    if slash:
        if not _is_address(address):
            raise ValueError(f"{entry!r}: give the host alone, without a path")
        network_class = ipaddress.IPv6Network if ":" in address else ipaddress.IPv4Network
        try:
            network_class(text)
        except ValueError as exc:
            raise ValueError(f"{entry!r} is not a valid CIDR: {exc}") from None
    if text.startswith("[") and text.endswith("]") and _is_address(text[1:-1]):
        raise ValueError(f"{entry!r}: write the address without brackets, {text[1:-1]}")
    if ":" in text:
        if text.count(":") == 1 and not text.startswith("["):
            raise ValueError(f"{entry!r}: give the host alone, without a port")
        raise ValueError(f"{entry!r} is not a valid IPv6 address or CIDR")
    if "*" in text:
        raise ValueError(f"{entry!r}: wildcards are not supported, list each host name")
    return _host_name(entry, text)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _host_name(entry: str, text: str) -> str:
    name = text.lower().removesuffix(".")
    if not name.isascii():
        try:
            name = idna.encode(name).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"{entry!r} is not a valid host name: {exc}") from None
    labels = name.split(".")
    if all(label.isdigit() for label in labels if label):
        raise ValueError(f"{entry!r} is not a valid IP address")
    if labels[-1].isdigit():
        raise ValueError(f"{entry!r} is not a valid host name: the last label is a number")
    if len(name) > 253:
        raise ValueError(f"{entry!r} is not a valid host name: longer than 253 characters")
    for label in labels:
        if not label:
            raise ValueError(f"{entry!r} is not a valid host name: an empty label")
        if len(label) > 63:
            raise ValueError(f"{entry!r} is not a valid host name: a label over 63 characters")
        if not _LABEL.fullmatch(label):
            bad = next((c for c in label if not (c.isalnum() or c in "_-")), None)
            why = (
                f"{bad!r} cannot appear in a host name"
                if bad
                else f"the label {label!r} starts or ends with '-'"
            )
            raise ValueError(f"{entry!r} is neither a CIDR nor a host name: {why}")
    return name


def _normal_allow_entry(entry: str) -> str:
    return str(parse_allow_entry(entry))


#: One allow-list entry, checked and normalized (``10.0.0.0/8``, ``hooks.internal``).
AllowEntry = Annotated[str, AfterValidator(_normal_allow_entry)]


class WebhooksConfig(_Config):
    """Webhook delivery: the schedule, the deadline, the SSRF policy and the worker."""

    #: Attempts per delivery, the first immediate (spec: 5).
    max_attempts: int = Field(default=5, ge=1, le=20)
    #: Seconds before each retry, in order (spec: 1 s, 5 s, 30 s, 5 min, 30 min).
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 30.0, 300.0, 1800.0)
    #: Total deadline of one attempt, connect to status line (spec: 5 s).
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    #: Admit http:// URLs (addresses are still checked). For development only.
    allow_http: bool = False
    #: Operator allow-list past the SSRF guard: CIDRs (``127.0.0.0/8``, no host bits set) or
    #: exact host names (no scheme, port or path).
    allow: tuple[AllowEntry, ...] = ()
    #: Run the delivery worker inside the gateway (``gateway-kit worker`` runs it alone).
    worker: bool = True
    #: Deliveries in flight per worker, and per webhook (one dead endpoint cannot starve
    #: the others).
    concurrency: int = Field(default=32, ge=1, le=1000)
    per_webhook_concurrency: int = Field(default=4, ge=1, le=100)
    #: How often an idle worker looks for due deliveries.
    poll_interval_s: float = Field(default=0.5, gt=0, le=60)
    #: How long a worker owns a claimed delivery; must exceed ``timeout_s``.
    lease_s: float = Field(default=30.0, gt=0, le=3600)
    max_webhooks_per_workspace: int = Field(default=20, ge=1, le=1000)
    #: Attempts kept in each webhook's delivery log.
    log_size: int = Field(default=1000, ge=10, le=100_000)

    @model_validator(mode="after")
    def _check_schedule(self) -> WebhooksConfig:
        if len(self.retry_backoff_s) < self.max_attempts - 1:
            raise ValueError(
                f"retry_backoff_s: needs at least {self.max_attempts - 1} values for "
                f"max_attempts = {self.max_attempts}"
            )
        if not all(0 <= delay <= 7 * 86_400 for delay in self.retry_backoff_s):  # nan too
            raise ValueError("retry_backoff_s: delays are seconds from 0 to 604800 (a week)")
        if self.lease_s <= self.timeout_s:
            raise ValueError(
                f"lease_s: must be longer than timeout_s ({self.lease_s:g} s <= "
                f"{self.timeout_s:g} s)"
            )
        return self
