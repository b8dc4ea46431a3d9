"""The per-deployment circuit breaker, shared by every gateway instance through the storage.

A deployment that fails ``allowed_fails`` times within ``fail_window_s`` (counted in the
storage, so failures seen by different instances add up) is **open**: skipped by every
instance for ``cooldown_s``. Then it is **half-open**: one request (whichever instance claims
the probe first) tries it; an answer (a success, or the client's own 4xx) closes it, failure
opens it again for another cooldown.

Storage keys, in the ``routing`` partition, per deployment ``<provider>/<upstream model>``:

- ``routing:fails:<d>``  the failures of the current window (a counter that expires);
- ``routing:open:<d>``   present while cooling down (its value: when the cooldown ends);
- ``routing:trip:<d>``   present from a trip until a probe succeeds (half-open after the cooldown);
- ``routing:probe:<d>``  the claim of the one probing request.

The request path reads nothing: each instance keeps a view of every deployment's state,
refreshed in the background (``run``, which the ``Gateway`` starts) every ``refresh_s`` seconds
with one round trip for all of them, so another instance's trip reaches it within that time,
and a slow or stalled storage never holds a request (the view it has is used meanwhile). Only
failures, probes and recoveries write. A storage failure never blocks a request: a deployment
never seen is taken as healthy, a known one keeps its last known state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from gateway_kit._clock import waitable
from gateway_kit.config import RoutingConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Storage

__all__ = ["Cooldowns", "Health"]

logger = logging.getLogger("gateway_kit.routing")

_PARTITION = "routing"


@dataclass(frozen=True, slots=True)
class Health:
    """A deployment's state as one instance sees it."""

    key: str
    #: ``closed`` (healthy), ``open`` (cooling down) or ``half_open`` (ready for a probe).
    state: str
    #: When the cooldown ends (Unix seconds), for an open deployment.
    cooling_until: float | None = None
    #: Failures counted in the current window (read on demand, for the operator view).
    recent_failures: int = 0


@dataclass(slots=True)
class _Seen:
    until: float | None  # the cooldown's end while open
    tripped: bool


class Cooldowns:
    """Counts failures, trips and probes deployments; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        config: RoutingConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._storage = storage
        self._config = config
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._unreadable = False  # the last refresh failed (logged once per outage)

    @staticmethod
    def _key(kind: str, deployment: str) -> str:
        return f"{_PARTITION}:{kind}:{deployment}"

    async def run(
        self, deployments: Sequence[str], *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Refresh the view of ``deployments`` now, report started, then every ``refresh_s``
        until cancelled (the ``Gateway`` runs it; a ``Clock`` such as a test's ``FakeClock``
        times the waits)."""
        clock = waitable(self._clock)
        await self.refresh(deployments)
        task_status.started()
        while True:
            await clock.sleep_until(clock() + self._config.refresh_s)
            await self.refresh(deployments)

    async def refresh(self, deployments: Sequence[str]) -> None:
        """Read the state of ``deployments`` from the storage into this instance's view (one
        round trip); when the storage fails, the view stays as it was."""
        reads = [self._key(kind, d) for d in deployments for kind in ("open", "trip")]
        try:
            result = await self._storage.incr_many((), reads=reads)
        except StorageError as exc:
            if not self._unreadable:
                logger.warning("deployment health unreadable, the last view kept: %s", exc)
            self._unreadable = True
            return
        self._unreadable = False
        for d in deployments:
            opened = result.reads.get(self._key("open", d))
            until = _float(opened) if opened is not None else None
            self._seen[d] = _Seen(until, result.reads.get(self._key("trip", d)) is not None)

    def state(self, deployment: str) -> str:
        """``closed``, ``open`` or ``half_open``, from this instance's (refreshed) view."""
        seen = self._seen.get(deployment)
        if seen is None:
            return "closed"
        if seen.until is not None and self._clock() < seen.until:
            return "open"
        return "half_open" if seen.tripped else "closed"

    def cooling_until(self, deployment: str) -> float | None:
        seen = self._seen.get(deployment)
        return seen.until if seen is not None else None

    async def claim_probe(self, deployment: str) -> bool:
        """Whether this request is the one to probe a half-open deployment."""
        try:
            return await self._storage.set(
                self._key("probe", deployment),
                b"1",
                ttl=self._config.cooldown_s,
                if_absent=True,
            )
        except StorageError as exc:
            logger.warning("probe claim failed, probing anyway: %s", exc)
            return True

    async def release_probe(self, deployment: str) -> None:
        """A probe that never finished (its request cancelled: the client left): another
        request may probe at once (the claim once kept every request out for ``cooldown_s``)."""
        try:
            await self._storage.delete(self._key("probe", deployment))
        except StorageError as exc:
            logger.warning("probe claim not released: %s", exc)

    async def failed(self, deployment: str, *, probing: bool = False) -> bool:
        """Count a failure; ``True`` when it put the deployment in cooldown."""
        config = self._config
        try:
            if not probing:
                count = await self._storage.incr(
                    self._key("fails", deployment), 1, ttl=config.fail_window_s
                )
                if count.value < config.allowed_fails:
                    return False
            await self._trip(deployment)
        except StorageError as exc:
            logger.warning("deployment failure not recorded: %s", exc)
            return False
        return True

    async def _trip(self, deployment: str) -> None:
        config, storage = self._config, self._storage
        now = self._clock()
        until = now + config.cooldown_s
        await storage.set(
            self._key("open", deployment), repr(until).encode(), ttl=config.cooldown_s
        )
        # Half-open after the cooldown until a probe succeeds; forgotten if nobody ever probes.
        await storage.set(
            self._key("trip", deployment), b"1", ttl=config.cooldown_s * 4 + config.fail_window_s
        )
        await storage.delete(self._key("fails", deployment))
        await storage.delete(self._key("probe", deployment))
        self._seen[deployment] = _Seen(until, True)
        logger.warning("deployment %s cools down for %g s", deployment, config.cooldown_s)

    async def recovered(self, deployment: str) -> None:
        """A probe succeeded: the deployment is healthy again."""
        try:
            for kind in ("trip", "probe", "fails"):
                await self._storage.delete(self._key(kind, deployment))
        except StorageError as exc:
            logger.warning("deployment recovery not recorded: %s", exc)
            return
        self._seen[deployment] = _Seen(None, False)
        logger.info("deployment %s is healthy again", deployment)

    async def health(self, deployments: Sequence[str]) -> list[Health]:
        """Each deployment's state read from the storage now (for the operator view)."""
        keys = [self._key(kind, d) for d in deployments for kind in ("open", "trip", "fails")]
        result = await self._storage.incr_many((), reads=keys)
        report = []
        for d in deployments:
            opened = result.reads.get(self._key("open", d))
            until = _float(opened) if opened is not None else None
            tripped = result.reads.get(self._key("trip", d)) is not None
            self._seen[d] = _Seen(until, tripped)
            fails = result.reads.get(self._key("fails", d))
            state = self.state(d)
            report.append(
                Health(
                    d,
                    state,
                    until if state == "open" else None,
                    int(fails) if fails is not None else 0,
                )
            )
        return report


def _float(value: bytes) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None
