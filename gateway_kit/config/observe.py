"""Observability: the request log, the log lines, ``/metrics`` and traces."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway_kit.config.base import _Config

__all__ = ["LogsConfig", "MetricsConfig", "RequestLogConfig", "TracingConfig"]


class RequestLogConfig(_Config):
    """One record per chat and embeddings request, kept in the storage per workspace."""

    enabled: bool = True
    #: Records kept per workspace, the oldest dropped first.
    max_records: int = Field(default=100_000, ge=100, le=10_000_000)
    #: Days of usage totals (per day and model) kept.
    usage_days: int = Field(default=400, ge=1, le=3650)
    #: Seconds between two writes of the records collected (and at shutdown).
    flush_interval_s: float = Field(default=1.0, gt=0, le=60)
    #: Records held in memory while the storage cannot take them; past it the oldest go.
    max_pending: int = Field(default=100_000, ge=1000, le=10_000_000)


class LogsConfig(_Config):
    """The gateway's own log lines (``gateway_kit.requests`` and the rest)."""

    #: ``text``: one human line per request; ``json``: one JSON object per line.
    format: Literal["text", "json"] = "text"
    #: A line per request at INFO (``False``: failures only, at WARNING).
    requests: bool = True


class MetricsConfig(_Config):
    """``GET /metrics`` in the Prometheus exposition format (the ``metrics`` extra)."""

    enabled: bool = False
    #: Label request metrics with the workspace id too (one series per workspace: only for
    #: a bounded number of workspaces).
    workspace_label: bool = False
    #: Who may read ``/metrics``: the operator's token (``admin.token``), or anyone who can
    #: reach the port when ``public`` (bind it to a private interface then).
    access: Literal["operator", "public"] = "operator"


class TracingConfig(_Config):
    """OpenTelemetry spans (the ``otel`` extra): the request, each layer, storage and the
    upstream call. Without an SDK and exporter configured by the host, they cost nothing."""

    enabled: bool = False
