"""``gateway-kit logs`` and ``gateway-kit usage``: a workspace's request log and usage, as the
operator, from the storage the gateways write them to.

- ``logs --workspace WS [--limit N] [--model M] [--key KID] [--status S] [--follow]``: the
  newest requests, oldest first, a line each (``--json``: a JSON object per line);
  ``--follow`` then prints new ones as the gateways write them (within a second or two) until
  interrupted;
- ``usage --workspace WS [--since DAY] [--until DAY]``: requests, tokens, cost and savings per
  day and model (the last 30 days by default).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from gateway_kit._text import printable
from gateway_kit.cli._store import AddConfig, UsageError, add_common, require_workspace
from gateway_kit.cost.money import usd_text
from gateway_kit.gateway import Gateway
from gateway_kit.observe.record import decode
from gateway_kit.observe.requestlog import STATUS, RequestFilter, is_day, log_key
from gateway_kit.observe.usage import METRICS
from gateway_kit.storage import LogEntry

__all__ = ["add_parser"]

#: Seconds between two reads of the log with ``--follow``.
FOLLOW_INTERVAL_S = 1.0


def add_parser(commands: Any, add_config: AddConfig) -> None:
    logs = commands.add_parser("logs", help="a workspace's request log")
    logs.add_argument("--workspace", required=True, metavar="WS_ID")
    logs.add_argument("--limit", type=int, default=20, help="how many (default 20, at most 1000)")
    logs.add_argument("--model", metavar="MODEL", help="only requests for this model")
    logs.add_argument("--key", metavar="KEY_ID", help="only requests made with this key")
    logs.add_argument("--status", metavar="STATUS", help="a code, 4xx, 5xx or error")
    logs.add_argument("--follow", "-f", action="store_true", help="print new requests as they come")
    add_common(logs, add_config, _logs, reads_only=True)

    usage = commands.add_parser("usage", help="a workspace's usage per day and model")
    usage.add_argument("--workspace", required=True, metavar="WS_ID")
    usage.add_argument("--since", metavar="YYYY-MM-DD", help="first day (default: 30 days ago)")
    usage.add_argument("--until", metavar="YYYY-MM-DD", help="last day (default: today)")
    add_common(usage, add_config, _usage, reads_only=True)


def line_of(record: dict[str, Any]) -> str:
    """A record as one human line."""
    model = record["model"] or "-"
    if record["served_model"] and record["served_model"] != record["model"]:
        model += f"->{record['served_model']}"
    parts = [
        record["created_at"],
        record["id"],
        record["key_id"] or "-",
        record["route"],
        model,
        str(record["status"]),
        f"{record['latency_ms']['total']:.1f}ms",
    ]
    usage = record["usage"]
    if usage["input_tokens"] or usage["output_tokens"]:
        parts.append(f"in={usage['input_tokens']} out={usage['output_tokens']}")
    if record["cost_micro_usd"] is not None:
        parts.append(f"${usd_text(record['cost_micro_usd'])}")
    cache = record["verdicts"].get("cache")
    if cache is not None:
        parts.append(f"cache={cache['action']}")
    if record["error_code"]:
        parts.append(f"error={record['error_code']}")
    if not record["completed"]:
        parts.append("incomplete")
    return printable(" ".join(parts))


async def _logs(gateway: Gateway, args: argparse.Namespace) -> None:
    if not 1 <= args.limit <= 1000:
        raise UsageError(f"--limit: must be from 1 to 1000, got {args.limit}")
    if args.status is not None and not STATUS.fullmatch(args.status):
        raise UsageError(f"--status: a code, 4xx, 5xx or error, not {args.status!r}")
    await require_workspace(gateway, args.workspace)
    where = RequestFilter(model=args.model, key_id=args.key, status=args.status)
    page = await gateway.requests.page(args.workspace, where=where, limit=args.limit)
    show = _printer(args.json)
    for record in reversed(page.records):
        show(record)
    if not args.follow:
        return
    key = log_key(args.workspace)
    newest = await gateway.storage.log_page(key, limit=1)
    last = newest[0].seq if newest else 0
    while True:
        await anyio.sleep(FOLLOW_INTERVAL_S)
        fresh = await _since(gateway, key, last)
        if fresh:
            last = fresh[0].seq
        for entry in reversed(fresh):
            record = decode(entry.value)
            if where.matches(record):
                show(record)


async def _since(gateway: Gateway, key: str, last: int) -> list[LogEntry]:
    """The log's entries after position ``last``, newest first (however many arrived)."""
    fresh: list[LogEntry] = []
    before = None
    while True:
        page = await gateway.storage.log_page(key, limit=1000, before=before)
        for entry in page:
            if entry.seq <= last:
                return fresh
            fresh.append(entry)
        if len(page) < 1000:
            return fresh
        before = page[-1].seq


def _printer(as_json: bool) -> Any:
    def show(record: dict[str, Any]) -> None:
        print(json.dumps(record) if as_json else line_of(record), flush=True)

    return show


async def _usage(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    for option, value in (("--since", args.since), ("--until", args.until)):
        if value is not None and not is_day(value):
            raise UsageError(f"{option}: a day as YYYY-MM-DD, not {value!r}")
    await require_workspace(gateway, args.workspace)
    today = datetime.fromtimestamp(gateway.clock(), UTC).date()
    since = args.since or (today - timedelta(days=29)).isoformat()
    rows = await gateway.requests.usage.read(
        args.workspace, since=since, until=args.until or today.isoformat()
    )
    out = []
    for row in rows:
        shown: dict[str, Any] = {"day": row.day, "model": row.model}
        for metric in METRICS:
            value = row.totals[metric]
            if args.json or not metric.endswith("_micro_usd"):
                shown[metric] = value
            else:
                shown[metric.replace("_micro_usd", "_usd")] = usd_text(value)
        out.append(shown)
    return out
