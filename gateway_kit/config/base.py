"""What every configuration model shares, and the two policy switches every layer has."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["NAME_PATTERN", "Mode", "OnError", "PeriodUnit"]

#: Provider and model names: what may appear in a URL path or a header.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"


#: The length of a quota or budget period (calendar, UTC).
PeriodUnit = Literal["month", "week", "day"]


class Mode(StrEnum):
    """A policy layer's mode (DESIGN.md section 3).

    ``enforce`` acts on its verdicts; ``monitor`` computes them, says what it would have done
    (a header, an event) and never blocks or rewrites; ``off`` does nothing.
    """

    ENFORCE = "enforce"
    MONITOR = "monitor"
    OFF = "off"


class OnError(StrEnum):
    """What a layer does when its storage or detector fails: serve the request unchecked
    (``open``) or answer 503 (``closed``)."""

    OPEN = "open"
    CLOSED = "closed"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
