"""Where the request quota and the burst limit keep their state.

Layout (``<ws>`` a workspace id, ``<p>`` a period id such as ``2026-11``)::

    <ws>:quota:<p>      requests counted this period (a counter, limited to the plan's quota)
    <ws>:burst          the GCRA state of the burst limit (requests per minute)
"""

from __future__ import annotations

from gateway_kit.accounts.periods import Period

__all__ = ["burst_key", "quota_key"]


def quota_key(workspace_id: str, period: Period) -> str:
    return f"{workspace_id}:quota:{period.id}"


def burst_key(workspace_id: str) -> str:
    return f"{workspace_id}:burst"
