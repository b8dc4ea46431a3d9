"""The gateway's log lines: one per request (``gateway_kit.requests``), and their format.

``RequestLines`` writes a line per chat and embeddings request at INFO (``logs.requests``), and
at WARNING whatever failed upstream: a 5xx answer, a stream broken off, a request served only
after other deployments failed (the attempts are in the line). The human line reads::

    req_3f... ws_demo kid_1a... chat mock-mini 200 12.4ms in=12 out=40 $0.000031 cache=miss

``JSONFormatter`` turns any log record into one JSON object per line; a request's line carries
its whole record (``gateway_kit.observe.record``) under ``request``. What a line holds comes
from the record, which never holds a key, a secret or the text of a prompt or answer.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway_kit._text import printable
from gateway_kit.config.observe import LogsConfig
from gateway_kit.cost.money import usd_text
from gateway_kit.observe.record import RequestRecord, iso_ms

__all__ = ["JSONFormatter", "RequestLines", "logging_config"]

logger = logging.getLogger("gateway_kit.requests")


class RequestLines:
    def __init__(self, config: LogsConfig) -> None:
        self._all = config.requests

    def emit(self, record: RequestRecord) -> None:
        failed = (
            record.status >= 500
            or record.error_code == "upstream_stream_error"
            or bool(record.fallbacks)
        )
        level = logging.WARNING if failed else logging.INFO
        if (failed or self._all) and logger.isEnabledFor(level):
            logger.log(level, "%s", _line(record), extra={"request": record})


def _line(record: RequestRecord) -> str:
    parts = [
        record.request_id,
        record.workspace_id or "-",
        record.key_id or "-",
        record.route,
        record.model or "-",
    ]
    if record.served_model is not None and record.served_model != record.model:
        parts[-1] += f"->{record.served_model}"
    parts += [str(record.status), f"{record.total_ms:.1f}ms"]
    if record.error_code is not None:
        parts.append(f"error={record.error_code}")
    if record.input_tokens or record.output_tokens:
        parts += [f"in={record.input_tokens}", f"out={record.output_tokens}"]
    if record.cost_micro_usd is not None:
        parts.append(f"${usd_text(record.cost_micro_usd)}")
    if record.cache is not None:
        parts.append(f"cache={record.cache}")
    if record.fallbacks:
        parts.append("failed=" + ",".join(record.fallbacks))
    if not record.completed:
        parts.append("incomplete")
    # The model is the client's text, an error code an upstream's: neither forges a line.
    return printable(" ".join(parts))


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message`` (and
    ``exception``); a request's line adds ``request``, its record as the API shows it."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": iso_ms(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request = getattr(record, "request", None)
        if isinstance(request, RequestRecord):
            line["request"] = request.to_dict()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"), default=str)


class _InferenceAccess(logging.Filter):
    """Drops uvicorn's access lines of the inference routes: their request lines say more."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            isinstance(args, tuple)
            and len(args) >= 3
            and str(args[2]).startswith(("/v1/chat/completions", "/v1/embeddings"))
        )


def logging_config(config: LogsConfig, level: str) -> dict[str, Any]:
    """``logging.config.dictConfig`` for ``gateway-kit serve``: uvicorn's loggers and the
    gateway's, in ``config.format``, at ``level`` (uvicorn's ``--log-level``)."""
    text = {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    formatter = {"()": JSONFormatter} if config.format == "json" else text
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "filters": {"inference": {"()": _InferenceAccess}},
        "handlers": {
            "main": handler,
            "access": {**handler, "filters": ["inference"]},
        },
        "loggers": {
            "gateway_kit": {"handlers": ["main"], "level": upper, "propagate": False},
            "uvicorn": {"handlers": ["main"], "level": upper, "propagate": False},
            "uvicorn.error": {"level": upper},
            "uvicorn.access": {"handlers": ["access"], "level": upper, "propagate": False},
        },
    }
