"""The HTTP side of the standalone gateway, its storage, and the operator's token."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway_kit.config.base import _Config
from gateway_kit.storage._factory import check_storage_url

__all__ = ["AdminConfig", "ServerConfig", "StorageConfig", "host_problem"]

#: Digits and dots only: meant as an IPv4 address, so it must be one.
_DOTTED = re.compile(r"[\d.]+")
#: A host name: labels of letters, digits and hyphens, not starting or ending with a hyphen.
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?"
)


def host_problem(host: str) -> str | None:
    """What is wrong with ``host`` as an address to listen on (an IP address, or a host name's
    syntax), or ``None``: ``999.1.1.1`` failed only at the bind, with a wrong hint and exit 1."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if _DOTTED.fullmatch(host) or not _HOST_NAME.fullmatch(host):
            return f"{host!r} is neither an IP address nor a host name"
    return None


class ServerConfig(_Config):
    """The HTTP side of the standalone gateway."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)

    @field_validator("host")
    @classmethod
    def _valid_host(cls, host: str) -> str:
        problem = host_problem(host)
        if problem is not None:
            raise ValueError(problem)
        return host

    #: Request bodies above this many bytes are answered 413.
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    #: ``gateway-kit serve`` on ``SIGTERM``: the seconds requests in flight get to finish;
    #: past them they are cancelled (their reservations still settled) and the gateway stops.
    shutdown_timeout_s: int = Field(default=30, ge=1, le=3600)


class StorageConfig(_Config):
    """Where state lives: ``memory://``, ``sqlite:///path`` or ``redis://host:port/db``."""

    #: The standalone gateway's embedded default: a SQLite file in the working directory.
    url: str = "sqlite:///gateway-kit.db"
    #: Redis only: the namespace of every key, so that several gateways can share one server.
    redis_prefix: str = Field(default="gk:", min_length=1, max_length=64)

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        check_storage_url(url)  # the form only: a Redis URL's extra is checked at load
        return url


class AdminConfig(_Config):
    """The operator API under ``/api/v1/admin`` (wallet top-ups and billing)."""

    #: ``Authorization: Bearer <token>``; unset, the operator API answers 404. Use 32+ random
    #: characters, e.g. from ``GATEWAY_KIT_ADMIN__TOKEN``.
    token: SecretStr | None = Field(default=None)

    @model_validator(mode="after")
    def _check_token(self) -> AdminConfig:
        if self.token is not None and len(self.token.get_secret_value()) < 24:
            raise ValueError("token: use at least 24 random characters")
        return self
