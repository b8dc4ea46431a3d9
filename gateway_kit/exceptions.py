"""Exceptions raised by gateway-kit.

The tree::

    GatewayError
    ├── ConfigError            an invalid configuration file or environment override
    │   └── MissingExtraError  a configured feature whose optional extra is not installed
    ├── InvalidRequestError    a management request that cannot be honoured (bad e-mail, plan...)
    ├── NotFoundError          no such workspace, key or webhook (in that workspace)
    ├── StorageError           a storage backend failed (never carries URLs or passwords)
    │   └── InvalidKeyError    an empty, oversized or malformed storage key
    ├── ProviderError          an upstream model provider failed
    │   ├── UpstreamUnavailableError   5xx, connection error or timeout before a response
    │   └── UpstreamStreamError        a stream that broke off after it had started
    ├── SignatureError         a signed payload (a payment processor's event) failed to verify
    └── UnsafeURLError         a webhook URL the SSRF guard refuses (the message says why)

Layers never raise these at clients: they answer with an OpenAI-shaped error body. The
exceptions are for code that embeds the pieces (storage, providers, configuration) directly.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ConfigError",
    "GatewayError",
    "InvalidKeyError",
    "InvalidRequestError",
    "MissingExtraError",
    "NotFoundError",
    "ProviderError",
    "SignatureError",
    "StorageError",
    "UnsafeURLError",
    "UpstreamStreamError",
    "UpstreamUnavailableError",
]


class GatewayError(Exception):
    """Base class of every gateway-kit error."""


class ConfigError(GatewayError):
    """The configuration is invalid; the message, one line, names the file and the field."""


class MissingExtraError(ConfigError, ImportError):
    """The configuration asks for something an optional extra provides, and it is not
    installed; the message names the field and the ``pip install`` to run.

    ``where`` is the field (``storage.url``), after the file or variable when known;
    ``feature`` what it asks for (``redis://``); ``extra`` the extra (``redis``); ``module``
    the module that is missing (also ``ImportError.name``).
    """

    def __init__(self, where: str, feature: str, *, extra: str, module: str) -> None:
        super().__init__(
            f"{where}: {feature} needs the {extra} extra: pip install 'gateway-kit[{extra}]'",
            name=module,
        )
        self.extra = extra


class InvalidRequestError(GatewayError, ValueError):
    """A management request that cannot be honoured; the message says why, ``param`` which
    field it is about (when one is)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class NotFoundError(GatewayError, LookupError):
    """No such workspace, key or webhook (in the workspace asked about)."""


class StorageError(GatewayError):
    """A storage backend failed. Messages never include URLs, hosts' credentials or values."""

    #: How many were raised in this process, bad keys aside (``gateway_storage_errors_total``).
    raised: ClassVar[int] = 0

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if not isinstance(self, InvalidKeyError):
            StorageError.raised += 1


class InvalidKeyError(StorageError, ValueError):
    """A storage key is empty, too long or otherwise unusable."""


class ProviderError(GatewayError):
    """An upstream provider failed."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        #: The upstream HTTP status, 0 when no response arrived (connection error, timeout).
        self.status = status
        #: Seconds the upstream asked to wait before retrying (its ``Retry-After``), if any.
        self.retry_after = retry_after


class UpstreamUnavailableError(ProviderError):
    """The upstream answered 5xx, refused the connection or timed out before answering."""


class UpstreamStreamError(ProviderError):
    """A streamed response broke off before its end."""


class SignatureError(GatewayError, ValueError):
    """A signed payload failed to verify; the message says why, never the secret."""


class UnsafeURLError(GatewayError, ValueError):
    """The SSRF guard refused a webhook URL; the message is the user-facing reason."""
