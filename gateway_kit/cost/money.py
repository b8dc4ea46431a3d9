"""Money as the gateway keeps it: integer micro-USD, read from and written as decimal USD."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gateway_kit.exceptions import InvalidRequestError

__all__ = ["parse_usd", "usd_text"]


def usd_text(micro_usd: int) -> str:
    """Exact decimal USD with six places: ``1234`` micro-USD is ``"0.001234"``."""
    sign = "-" if micro_usd < 0 else ""
    whole, part = divmod(abs(micro_usd), 1_000_000)
    return f"{sign}{whole}.{part:06d}"


def parse_usd(value: Any, name: str, *, high: int, positive: bool = False) -> int:
    """A USD amount (a JSON number from 0, or above 0, to ``high``) as integer micro-USD,
    rounded half up. Anything else raises ``InvalidRequestError`` naming ``name``."""
    bounds = f"above 0 and at most {high:,}" if positive else f"from 0 to {high:,}"
    invalid = InvalidRequestError(f"'{name}' must be a number of US dollars {bounds}.", param=name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid
    amount = Decimal(str(value))
    if not amount.is_finite() or amount < 0 or (positive and amount == 0) or amount > high:
        raise invalid
    micro = int((amount * 1_000_000).to_integral_value(rounding=ROUND_HALF_UP))
    if positive and micro <= 0:
        raise InvalidRequestError(f"'{name}' is below a micro-dollar.", param=name)
    return micro
