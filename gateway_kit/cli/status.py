"""``gateway-kit status``: a workspace's plan, quota, burst limit, savings, budget and wallet.

It calls ``GET /v1/me`` and ``GET /api/v1/workspaces/{id}/budget`` with the key from
``--api-key`` or ``GATEWAY_KIT_API_KEY`` (a key without ``budget:read``, such as an inference
key, shows no budget and says why). The key is never printed, not even in error messages.
``--json`` prints the ``/v1/me`` object exactly as received.

``gateway-kit status --routes`` is the operator's view instead: every model, its fallbacks and
its deployments' health (``GET /api/v1/admin/routes``, with the operator token from
``--admin-token`` or ``GATEWAY_KIT_ADMIN_TOKEN``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from datetime import datetime
from typing import Any

import httpx

BAR_WIDTH = 30
MAX_TIMEOUT_S = 3600.0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("status", help="show a workspace's plan, quota and savings")
    parser.add_argument(
        "--base-url",
        default=os.environ.get("GATEWAY_KIT_BASE_URL", "http://127.0.0.1:8080"),
        help="the gateway (default: $GATEWAY_KIT_BASE_URL, else http://127.0.0.1:8080)",
    )
    parser.add_argument("--api-key", help="the workspace's API key (default: $GATEWAY_KIT_API_KEY)")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds, at most 3600 (default 10)"
    )
    parser.add_argument("--json", action="store_true", help="print the raw /v1/me object")
    parser.add_argument(
        "--routes",
        action="store_true",
        help="the operator's view: models, fallbacks and deployment health (cooldowns)",
    )
    parser.add_argument(
        "--admin-token", help="the operator token for --routes (default: $GATEWAY_KIT_ADMIN_TOKEN)"
    )
    parser.set_defaults(handler=run)


def fail(message: str, code: int = 1) -> int:
    print(f"gateway-kit status: {message}", file=sys.stderr)
    return code


def _checked(args: argparse.Namespace, secret: str, what: str) -> str | None:
    """What is wrong with the command line, if anything (never repeating the secret)."""
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # NaN too
        return f"--timeout: must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds"
    try:
        url = httpx.URL(args.base_url)
    except httpx.InvalidURL as exc:
        return f"--base-url: not a URL ({exc})"
    if url.scheme not in ("http", "https") or not url.host:
        return "--base-url: an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080"
    if not secret.isascii() or not secret.isprintable() or " " in secret:
        return f"the {what} holds characters no {what} has (not shown)"
    return None


def _get(url: str, base_url: str, secret: str, timeout: float) -> httpx.Response | str:
    """The response, or what went wrong on the way (never naming the secret)."""
    try:
        return httpx.get(url, headers={"authorization": f"Bearer {secret}"}, timeout=timeout)
    except httpx.ConnectError:
        return f"cannot connect to {base_url}: is the gateway running there?"
    except httpx.TimeoutException:
        return f"no answer from {base_url} within {timeout:g} s"
    except httpx.HTTPError as exc:
        return f"request to {base_url} failed ({type(exc).__name__})"


def run(args: argparse.Namespace) -> int:
    if args.routes:
        return run_routes(args)
    key = args.api_key or os.environ.get("GATEWAY_KIT_API_KEY")
    if not key:
        return fail("no API key: pass --api-key or set GATEWAY_KIT_API_KEY", 2)
    if (mistake := _checked(args, key, "API key")) is not None:
        return fail(mistake, 2)
    base_url = args.base_url.rstrip("/")
    url = f"{base_url}/v1/me"
    response = _get(url, base_url, key, args.timeout)
    if isinstance(response, str):
        return fail(response)
    if response.status_code == 401:
        return fail("the API key was refused: it is invalid, revoked or expired")
    if response.status_code != 200:
        return fail(f"{url} answered {response.status_code}: {_message(response)}")
    if args.json:
        print(response.text)
        return 0
    try:
        me = response.json()
        lines = render(me, now=time.time())
    except (ValueError, KeyError, TypeError):
        return fail(f"{url} did not answer with a workspace status")
    budget = _budget(base_url, str(me["workspace_id"]), key, args.timeout)
    if isinstance(budget, dict):
        lines += "\n" + render_budget(budget)
    elif budget is not None:
        lines += "\n" + budget
    print(lines)
    return 0


def run_routes(args: argparse.Namespace) -> int:
    token = args.admin_token or os.environ.get("GATEWAY_KIT_ADMIN_TOKEN")
    if not token:
        return fail("no operator token: pass --admin-token or set GATEWAY_KIT_ADMIN_TOKEN", 2)
    if (mistake := _checked(args, token, "operator token")) is not None:
        return fail(mistake, 2)
    base_url = args.base_url.rstrip("/")
    url = f"{base_url}/api/v1/admin/routes"
    response = _get(url, base_url, token, args.timeout)
    if isinstance(response, str):
        return fail(response)
    if response.status_code != 200:  # 401: a wrong token; 404: no operator API configured
        return fail(f"{url} answered {response.status_code}: {_message(response)}")
    if args.json:
        print(response.text)
        return 0
    try:
        print(render_routes(response.json()["data"], now=time.time()))
    except (ValueError, KeyError, TypeError):
        return fail(f"{url} did not answer with the routes")
    return 0


def render_routes(routes: list[dict[str, Any]], *, now: float) -> str:
    lines = []
    for route in routes:
        fallbacks = route["fallbacks"]
        then = f" -> {' -> '.join(fallbacks)}" if fallbacks else ""
        lines.append(f"{route['model']} ({route['kind']}){then}")
        for d in route["deployments"]:
            state = d["state"]
            if state == "open" and d.get("cooling_until"):
                state = f"cooling down, {_duration(float(d['cooling_until']) - now)} left"
            elif state == "half_open":
                state = "half-open: the next request probes it"
            else:
                state = "healthy"
            failures = int(d["recent_failures"])
            recent = (
                f", {failures} recent failure{'s' if failures != 1 else ''}" if failures else ""
            )
            lines.append(
                f"  {d['provider']}/{d['upstream_model']}  weight {d['weight']:g}  {state}{recent}"
            )
    return "\n".join(lines) or "(no models)"


def _budget(
    base_url: str, workspace_id: str, key: str, timeout: float
) -> dict[str, Any] | str | None:
    """The budget and wallet; a line saying why not when the key may not read them; ``None``
    when the gateway does not say (an older one)."""
    try:
        response = httpx.get(
            f"{base_url}/api/v1/workspaces/{workspace_id}/budget",
            headers={"authorization": f"Bearer {key}"},
            timeout=timeout,
        )
        if response.status_code == 403:
            return "Budget     not shown: this key lacks budget:read (an admin key shows it)"
        budget = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return budget if isinstance(budget, dict) else None


def _usd(amount: float) -> str:
    """Cents for whole dollars, four places below a dollar (a request costs fractions of one)."""
    return f"${amount:,.2f}" if amount == 0 or abs(amount) >= 1 else f"${amount:,.4f}"


def render_budget(budget: dict[str, Any]) -> str:
    spent = float(budget["committed_usd"])
    cap = budget.get("cap_usd")
    if cap is None:
        line = f"Budget     no cap ({_usd(spent)} spent this period)"
    else:
        share = spent / float(cap) if cap else 1.0
        line = (
            f"Budget     {_usd(spent)} of {_usd(float(cap))} this period ({share:.1%}), "
            f"verdict {budget['verdict']}"
        )
    wallet = budget.get("wallet") or {}
    if wallet.get("billing"):
        balance = (
            f"Wallet     {_usd(float(wallet['balance_usd']))} "
            f"(last top-up {_usd(float(wallet['last_topup_usd']))})"
        )
    else:
        balance = "Wallet     not billed from a wallet"
    return line + "\n" + balance


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or "(empty body)"


def render(me: dict[str, Any], *, now: float) -> str:
    used, included = int(me["used_requests"]), int(me["included_requests"])
    share = used / included if included else 1.0
    filled = min(BAR_WIDTH, round(share * BAR_WIDTH))
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    reset = datetime.fromisoformat(str(me["reset_at"]).replace("Z", "+00:00"))
    return "\n".join(
        [
            f"Workspace  {me['workspace_id']} ({me['email']})",
            f"Plan       {me['plan']}",
            f"Requests   [{bar}] {used:,} / {included:,} ({share:.1%})",
            f"Burst      {int(me['burst_limit_rpm']):,} requests/minute",
            f"Savings    ${float(me['savings_usd']):,.2f}",
            f"Resets in  {_duration(reset.timestamp() - now)} ({me['reset_at']})",
        ]
    )


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return "now"
    if seconds < 120:  # a cooldown of 30 s read "1 min"
        return f"{math.ceil(seconds)} s"
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days} day{'s' if days != 1 else ''} {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{max(1, minutes)} min"
