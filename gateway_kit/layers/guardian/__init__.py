"""Guardian: loop protection for runaway agents (``facts``, ``rules``, ``policy``, ``step``,
``events``, ``middleware``). It sits after Limits and before Budget (``stack``)."""

from __future__ import annotations

from gateway_kit.layers.guardian.middleware import GuardianMiddleware
from gateway_kit.layers.guardian.policy import GuardianPolicy, GuardianVerdict

__all__ = ["GuardianMiddleware", "GuardianPolicy", "GuardianVerdict"]
