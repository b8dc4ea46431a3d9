"""Budget Control: spend caps per period with warn, downgrade and block verdicts.

Before the upstream call the layer reserves the request's estimated cost (prompt tokens counted
here, output as the model usually answers, not the ``max_tokens`` ceiling) as its part of the
request's one admission step, refused as a whole when the workspace's committed spend (settled
+ in flight) would pass ``block_at`` of its cap, or a key's cap. The verdict is the band the
committed spend falls in, this request included:

- below ``warn_at``: pass; from ``warn_at``: pass with ``x-gateway-budget: warn``;
- from ``downgrade_at``: the request goes to the model's ``downgrade_to`` (``x-gateway-budget:
  downgrade``, ``x-gateway-downgraded-from``); a model without one passes with ``warn``;
- past ``block_at``: ``402 budget_exceeded``, unless the downgrade target still fits.

With wallet billing on, the same step holds the estimate against the wallet's balance
(``402 insufficient_balance`` when it cannot cover it). After the response (success, upstream
error, stream error, a client that left, cancellation) the reservation is settled with the real
cost exactly once, and the request's savings are added. ``budget.alert`` is published once per
threshold per period (a storage ``set if absent`` decides, across processes), after the
response, when the spend settled reaches it (``block``: the cap used up), with that spend as
``spent_usd``: never on a reservation, which is an estimate held for a moment (a burst of them
once alerted 92 % while nothing was spent, and the real crossings then said nothing).
``monitor`` reserves nothing, never blocks
or rewrites, and says what it would have done; ``off`` only records spend and savings.
Requests without a principal (auth off) pass.

Modules: ``policy`` (``BudgetPolicy`` makes every decision, returning a ``BudgetVerdict``;
tested without ASGI), ``middleware`` (``BudgetMiddleware`` reads the request and the caps, joins
the admission and publishes the alerts), ``step`` (its part of one request: the reservation,
the verdict, the settlement).
"""

from __future__ import annotations

from gateway_kit.layers.budget.middleware import BudgetMiddleware
from gateway_kit.layers.budget.policy import BudgetPolicy, BudgetVerdict

__all__ = ["BudgetMiddleware", "BudgetPolicy", "BudgetVerdict"]
