"""Stripe events as Stripe's webhooks deliver them (API version 2025-09-30.clover), trimmed of
the fields gateway-kit never reads but keeping their neighbours, ids and nesting.

Each builder returns a fresh dict; ``changes`` replace top-level fields of the data object.
"""

from __future__ import annotations

import copy
from typing import Any

API_VERSION = "2025-09-30.clover"
CREATED = 1_777_636_800


def event(event_type: str, obj: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "api_version": API_VERSION,
        "created": CREATED,
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": event_type,
    }


_INVOICE: dict[str, Any] = {
    "id": "in_1SGk2hLkdIwHu7ixQq0pTz9a",
    "object": "invoice",
    "account_country": "US",
    "account_name": "Gateway Kit Cloud",
    "account_tax_ids": None,
    "amount_due": 2000,
    "amount_overpaid": 0,
    "amount_paid": 2000,
    "amount_remaining": 0,
    "amount_shipping": 0,
    "application": None,
    "attempt_count": 1,
    "attempted": True,
    "auto_advance": False,
    "automatic_tax": {"enabled": False, "liability": None, "provider": None, "status": None},
    "automatically_finalizes_at": None,
    "billing_reason": "manual",
    "collection_method": "charge_automatically",
    "confirmation_secret": None,
    "created": CREATED - 120,
    "currency": "usd",
    "custom_fields": None,
    "customer": "cus_T9a1b2C3d4E5f6",
    "customer_address": None,
    "customer_email": "billing@acme.example",
    "customer_name": "Acme Robotics",
    "default_payment_method": None,
    "description": "Gateway Kit credit top-up",
    "discounts": [],
    "due_date": None,
    "effective_at": CREATED - 110,
    "ending_balance": 0,
    "footer": None,
    "from_invoice": None,
    "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1Nq/test_YWNjdF8xTnE",
    "invoice_pdf": "https://pay.stripe.com/invoice/acct_1Nq/test_YWNjdF8xTnE/pdf?s=ap",
    "issuer": {"type": "self"},
    "last_finalization_error": None,
    "latest_revision": None,
    "lines": {
        "object": "list",
        "data": [
            {
                "id": "il_1SGk2hLkdIwHu7ixb4nT8vQe",
                "object": "line_item",
                "amount": 2000,
                "currency": "usd",
                "description": "Credit top-up",
                "invoice": "in_1SGk2hLkdIwHu7ixQq0pTz9a",
                "metadata": {},
                "quantity": 1,
            }
        ],
        "has_more": False,
        "total_count": 1,
        "url": "/v1/invoices/in_1SGk2hLkdIwHu7ixQq0pTz9a/lines",
    },
    "livemode": False,
    "metadata": {"workspace_id": "ws_acme"},
    "next_payment_attempt": None,
    "number": "8F3C2A1B-0007",
    "on_behalf_of": None,
    "parent": None,
    "payment_settings": {"default_mandate": None, "payment_method_types": None},
    "period_end": CREATED - 120,
    "period_start": CREATED - 120,
    "post_payment_credit_notes_amount": 0,
    "pre_payment_credit_notes_amount": 0,
    "receipt_number": None,
    "starting_balance": 0,
    "statement_descriptor": None,
    "status": "paid",
    "status_transitions": {
        "finalized_at": CREATED - 110,
        "marked_uncollectible_at": None,
        "paid_at": CREATED - 5,
        "voided_at": None,
    },
    "subtotal": 2000,
    "subtotal_excluding_tax": 2000,
    "test_clock": None,
    "total": 2000,
    "total_discount_amounts": [],
    "total_excluding_tax": 2000,
    "total_taxes": [],
    "webhooks_delivered_at": CREATED - 119,
}


def invoice(**changes: Any) -> dict[str, Any]:
    """A paid one-off top-up invoice of $20.00 for ``ws_acme``."""
    return {**copy.deepcopy(_INVOICE), **changes}


def failed_invoice(**changes: Any) -> dict[str, Any]:
    """The same invoice after its second automatic payment attempt was declined."""
    return invoice(
        **{
            "amount_paid": 0,
            "amount_remaining": 2000,
            "attempt_count": 2,
            "next_payment_attempt": CREATED + 3 * 86_400,
            "status": "open",
            "status_transitions": {
                "finalized_at": CREATED - 110,
                "marked_uncollectible_at": None,
                "paid_at": None,
                "voided_at": None,
            },
            **changes,
        }
    )


def subscription_invoice(**changes: Any) -> dict[str, Any]:
    """A renewal: the workspace is in the subscription's metadata, not the invoice's."""
    return invoice(
        **{
            "id": "in_1SHr7uLkdIwHu7ixW2s9KbLm",
            "billing_reason": "subscription_cycle",
            "metadata": {},
            "parent": {
                "type": "subscription_details",
                "quote_details": None,
                "subscription_details": {
                    "metadata": {"workspace_id": "ws_acme"},
                    "subscription": "sub_1SHr7tLkdIwHu7ixpP3mN0xZ",
                },
            },
            **changes,
        }
    )


_SESSION: dict[str, Any] = {
    "id": "cs_test_a1Hn4Q0mD8xB2c6Vf9Tr3LsK7yZ5wEj1uPq0RtYg8iO2lN4bM6vC",
    "object": "checkout.session",
    "adaptive_pricing": {"enabled": False},
    "after_expiration": None,
    "allow_promotion_codes": None,
    "amount_subtotal": 2000,
    "amount_total": 2000,
    "automatic_tax": {"enabled": False, "liability": None, "provider": None, "status": None},
    "billing_address_collection": None,
    "cancel_url": "https://app.gateway-kit.example/billing",
    "client_reference_id": None,
    "client_secret": None,
    "collected_information": None,
    "consent": None,
    "consent_collection": None,
    "created": CREATED - 300,
    "currency": "usd",
    "currency_conversion": None,
    "custom_fields": [],
    "custom_text": {
        "after_submit": None,
        "shipping_address": None,
        "submit": None,
        "terms_of_service_acceptance": None,
    },
    "customer": "cus_T9a1b2C3d4E5f6",
    "customer_creation": "if_required",
    "customer_details": {
        "address": {"country": "US", "postal_code": "94107"},
        "email": "billing@acme.example",
        "name": "Acme Robotics",
        "phone": None,
        "tax_exempt": "none",
        "tax_ids": [],
    },
    "customer_email": None,
    "discounts": [],
    "expires_at": CREATED + 86_100,
    "invoice": None,
    "invoice_creation": {"enabled": False, "invoice_data": None},
    "livemode": False,
    "locale": None,
    "metadata": {"workspace_id": "ws_acme"},
    "mode": "payment",
    "payment_intent": "pi_3SGk5aLkdIwHu7ix0xK9dT2b",
    "payment_link": None,
    "payment_method_collection": "if_required",
    "payment_method_types": ["card"],
    "payment_status": "paid",
    "recovered_from": None,
    "setup_intent": None,
    "shipping_address_collection": None,
    "shipping_cost": None,
    "shipping_options": [],
    "status": "complete",
    "submit_type": None,
    "subscription": None,
    "success_url": "https://app.gateway-kit.example/billing?paid=1",
    "total_details": {"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0},
    "ui_mode": "hosted",
    "url": None,
}


def session(**changes: Any) -> dict[str, Any]:
    """A completed, paid $20.00 top-up through Checkout for ``ws_acme``."""
    return {**copy.deepcopy(_SESSION), **changes}
