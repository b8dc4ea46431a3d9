"""What Guardian records of a trip: ``guardian.block`` once per episode, and the recent blocks.

An **episode** is one rule tripping for one key: the first block or throttle publishes
``guardian.block`` and starts it (a counter under ``<ws>:guardian:episode:<rule>:<key>``, kept
``guardian.episode_s``); the next ones only count, so a runaway loop refused a thousand times
sends one event, not a thousand. Each episode is also appended to the workspace's log of recent
blocks (``<ws>:guardian:log``, the last 100), which ``GET .../guardian`` shows with how many
requests the episode has refused so far.

``request_hash`` is an HMAC-SHA256 of the request's canonical digest under the deployment's
secret: ``guardian.hash_secret``, else one drawn at random once and kept in the storage
(``gk:guardian:secret``), so every gateway on that storage hashes alike.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

from gateway_kit.accounts.secrets import DeploymentSecret
from gateway_kit.events.models import Event, GuardianBlockData, format_timestamp
from gateway_kit.gateway import Gateway
from gateway_kit.layers.guardian.policy import Outcome

__all__ = ["LOG_SIZE", "GuardianRecorder", "episode_key", "log_key"]

LOG_SIZE = 100
_SECRET_KEY = "gk:guardian:secret"


def episode_key(workspace_id: str, rule: str, key_id: str) -> str:
    return f"{workspace_id}:guardian:episode:{rule}:{key_id}"


def log_key(workspace_id: str) -> str:
    return f"{workspace_id}:guardian:log"


class GuardianRecorder:
    """Hashes requests and records trips for one gateway (one per middleware)."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._secret = DeploymentSecret(
            lambda: gateway.storage, _SECRET_KEY, gateway.config.guardian.hash_secret
        )
        self._keyed: hmac.HMAC | None = None
        self._keyed_with = b""

    async def secret(self) -> bytes:
        """The HMAC key (read from the storage once, made there the first time)."""
        return await self._secret.get()

    def request_hash(self, secret: bytes, canonical: bytes) -> str:
        keyed = self._keyed
        if keyed is None or self._keyed_with != secret:
            # The key's pads hashed once, copied per request (OpenSSL looks the digest up and
            # hashes the pads on every one-shot call).
            keyed, self._keyed_with = hmac.new(secret, digestmod=hashlib.sha256), secret
            self._keyed = keyed
        mac = keyed.copy()
        mac.update(canonical)
        return "sha256:" + mac.hexdigest()

    async def record(
        self, workspace_id: str, key_id: str, outcome: Outcome, request_hash: str
    ) -> bool:
        """Count ``outcome`` in its episode; publish ``guardian.block`` (and log it) when it
        starts one. Whether it did."""
        gateway = self._gateway
        trip = outcome.trip
        ttl = gateway.config.guardian.episode_s
        count = await gateway.storage.incr(episode_key(workspace_id, trip.rule, key_id), 1, ttl=ttl)
        if count.value != 1:
            return False
        now = datetime.fromtimestamp(gateway.clock(), UTC)
        data = GuardianBlockData(
            rule=trip.rule,
            key_id=key_id,
            request_hash=request_hash,
            action=outcome.event_action,
            threshold=trip.threshold,
            observed=trip.observed,
            mode="monitor" if outcome.monitor else "enforce",
            message=trip.message[:500],
        )
        entry = {
            "at": format_timestamp(now),
            **data.model_dump(mode="json"),
        }
        await gateway.storage.log_append(
            log_key(workspace_id), json.dumps(entry).encode(), max_len=LOG_SIZE
        )
        await gateway.events.publish(Event.create(data, workspace_id=workspace_id, now=now))
        return True
