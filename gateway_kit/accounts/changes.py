"""The change feed: how every gateway process learns that a cached account record changed.

The request path reads things per request that rarely change: a key's principal, a
workspace's record (plan, status), its budget caps, its billing switch and its Guardian
settings. Each process caches them (a ``FeedCache`` per kind), and the writers that change them
(revoking or rotating a key, ``Workspaces.update``, ``save_settings``, ``set_billing``,
``GuardianSettingsStore.save``) append a **change** naming what they changed
to one feed in storage. Every process polls the feed (``ChangeFeed.run``) and drops the entries
the changes name, so a cached entry stays right for as long as it lives, and a warm key costs
no storage read at all.

Layout: one value, ``gk:changes``, JSON::

    {"epoch": "3f9c0a1b2c3d4e5f", "seq": 1042, "changes": ["key:<sha256>", "plan:ws_abc", ...]}

``changes`` holds the latest ``length`` changes (256 by default), oldest first; the last one
has sequence number ``seq``. Writers append with a compare-and-set loop, so changes are totally
ordered and none is lost, on every backend. ``epoch`` is drawn when the feed is created: a
reader that sees another epoch (the value was lost and made again) cannot know what it missed.

A reader keeps the epoch and sequence number it applied. A poll is one ``get``: unchanged bytes
cost nothing more; otherwise it applies the changes after its sequence number. When it cannot
prove it saw everything (its first poll, another epoch, a sequence number fallen off the list
because it was away or a burst outran it), it drops every cached entry: a refill, never a
stale answer.

The guarantees, with ``cache_ttl`` the configured bound:

- a change made through any process on the same storage stops being served here within
  ``cache_ttl``: polls run every ``cache_ttl / 4``, and cached entries are trusted only while
  the last successful poll began less than ``cache_ttl`` ago (polls failing or stuck: every
  read goes to storage, as with no cache);
- the writer's own process drops its entries at once;
- a read that missed the cache stores its answer only if no change was applied while it was
  reading (``FeedCache.version``), so a record read just before a change cannot outlive it;
- entries are refreshed from storage at least every ``max_age`` seconds anyway (10 minutes,
  with jitter so that a warm cache does not expire all at once): a backstop for changes made
  to storage behind gateway-kit's back.
"""

from __future__ import annotations

import json
import logging
import math
import random
import secrets
import time
from collections.abc import Callable
from typing import Any, Generic, Literal, Protocol, TypeVar, get_args

import anyio

from gateway_kit._ttl import TTLMap
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import Storage

__all__ = [
    "FEED_KEY",
    "LISTEN_INTERVAL_S",
    "Change",
    "ChangeFeed",
    "FeedCache",
    "FeedListener",
    "Topic",
]

#: Seconds between polls of a feed that caches nothing but has listeners (purges of the
#: answer cache reach every process within this).
LISTEN_INTERVAL_S = 1.0

logger = logging.getLogger("gateway_kit.accounts.changes")

#: The storage key of the feed (global partition).
FEED_KEY = "gk:changes"

#: What a change names: a key's SHA-256 digest, or a workspace id for the others.
Topic = Literal["key", "plan", "budget", "billing", "guardian", "pii", "cache", "semantic"]
Change = tuple[Topic, str]


class FeedListener(Protocol):
    """What the feed tells of changes: each change of its ``topic`` (``drop``), and that it
    could not follow the feed (``clear``: drop everything)."""

    @property
    def topic(self) -> str: ...

    def drop(self, ident: str) -> None: ...

    def clear(self) -> None: ...


V = TypeVar("V")

_LENGTH = 256
_MAX_AGE_S = 600.0
_JITTER = 0.2
# Each failed compare-and-set means another writer's append went in: progress overall.
_MAX_ATTEMPTS = 100


class _State:
    """One decoded value of the feed."""

    __slots__ = ("changes", "epoch", "seq")

    def __init__(self, epoch: str, seq: int, changes: list[str]) -> None:
        self.epoch = epoch
        self.seq = seq
        self.changes = changes

    @classmethod
    def decode(cls, raw: bytes) -> _State | None:
        """``None`` for a value this code did not write (it is then replaced, never trusted)."""
        try:
            data = json.loads(raw)
            state = cls(data["epoch"], data["seq"], data["changes"])
        except (ValueError, TypeError, KeyError):
            return None
        if (
            not isinstance(state.epoch, str)
            or not isinstance(state.seq, int)
            or not isinstance(state.changes, list)
            or not all(isinstance(c, str) for c in state.changes)
        ):
            return None
        return state

    def encode(self) -> bytes:
        body = {"epoch": self.epoch, "seq": self.seq, "changes": self.changes}
        return json.dumps(body, separators=(",", ":")).encode()


class FeedCache(Generic[V]):
    """One kind of cached entry (by ``topic``), dropped when the feed names it.

    ``get`` answers only while the feed is fresh. On a miss, take ``version``, read storage,
    then ``put`` the answer with that version: a change applied during the read refuses it.
    With a ``cache_ttl`` of 0 nothing is ever kept.
    """

    __slots__ = ("_feed", "_map", "topic")

    def __init__(self, feed: ChangeFeed, topic: Topic, *, maxsize: int = 100_000) -> None:
        self._feed = feed
        self.topic = topic
        self._map: TTLMap[str, V] = TTLMap(
            feed.max_age, maxsize=maxsize, clock=feed.clock, jitter=_JITTER, rand=feed.rand
        )
        feed._register(self)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def version(self) -> int:
        """Take this before reading storage on a miss; hand it to ``put``."""
        return self._feed.version

    def get(self, key: str) -> V | None:
        if not self._feed.fresh():
            return None
        return self._map.get(key)

    def put(self, key: str, value: V, *, version: int) -> None:
        if self._feed.caching and version == self._feed.version:
            self._map.set(key, value)

    def drop(self, key: str) -> None:
        self._map.pop(key)

    def clear(self) -> None:
        self._map.clear()


class ChangeFeed:
    """Publish changes to cached account records, and poll for other processes' changes.

    ``cache_ttl`` bounds how long a change made elsewhere may go unseen here (0: nothing is
    cached, every read asks storage; changes are still published for other processes).
    ``clock`` (monotonic seconds) times freshness, the entries' ``max_age`` and, when it has
    ``sleep_until`` (``gateway_kit.testing.FakeClock``), the polls; ``rand`` draws the
    entries' jitter. Run ``run`` in a task group to poll in the background.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        cache_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = _MAX_AGE_S,
        length: int = _LENGTH,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if cache_ttl < 0 or max_age <= 0 or length < 1:
            raise ValueError("cache_ttl must be >= 0, max_age > 0 and length >= 1")
        self._storage = storage
        self.cache_ttl = cache_ttl
        self.clock = clock
        self.max_age = max_age
        self.rand = rand
        self._length = length
        self._caches: dict[str, list[FeedListener]] = {}
        self._listened = False
        #: Moves whenever entries are dropped: a read begun before it moved is not cached.
        self.version = 0
        # What this process has applied: nothing yet (its first poll starts it off).
        self._synced = False
        self._epoch = ""
        self._seq = 0
        self._raw: bytes | None = None
        self._polled_at = -math.inf
        self._failing = False
        # Polls one at a time: an older read applied after a newer one would look like a
        # feed gone back in time.
        self._poll_lock = anyio.Lock()
        self._wake = anyio.Event()
        self._polled = anyio.Event()
        self._begun = 0
        self._ended = 0

    @property
    def caching(self) -> bool:
        return self.cache_ttl > 0

    @property
    def interval(self) -> float:
        """Seconds between polls: a quarter of ``cache_ttl``, so that a poll or two may fail
        before the cache stops being trusted (``LISTEN_INTERVAL_S`` when nothing is cached
        and only listeners follow the feed)."""
        if not self.caching:
            return LISTEN_INTERVAL_S
        return max(self.cache_ttl / 4, 0.01)

    def fresh(self) -> bool:
        """Whether cached entries may be trusted: the last good poll began under
        ``cache_ttl`` ago."""
        return self.clock() - self._polled_at < self.cache_ttl

    def _register(self, cache: FeedListener) -> None:
        self._caches.setdefault(cache.topic, []).append(cache)

    def listen(self, listener: FeedListener) -> None:
        """Have ``listener`` told of its topic's changes (``drop``) and of resets (``clear``),
        as the feed's own caches are (the answer cache's store listens for purges). The feed
        is then polled even with ``cache_ttl`` 0 (every ``LISTEN_INTERVAL_S``)."""
        self._register(listener)
        self._listened = True

    # -- writers ------------------------------------------------------------------------------

    async def publish(self, *changes: Change) -> None:
        """Drop ``changes`` here at once, then append them to the feed (after the storage
        write they describe: a process that polls them must read the new state)."""
        if not changes:
            return
        self._apply(changes)
        entries = [f"{topic}:{ident}" for topic, ident in changes]
        for _ in range(_MAX_ATTEMPTS):
            raw = await self._storage.get(FEED_KEY)
            state = _State.decode(raw) if raw is not None else None
            if state is None:
                state = _State(secrets.token_hex(8), 0, [])
            appended = (state.changes + entries)[-self._length :]
            new = _State(state.epoch, state.seq + len(entries), appended)
            if await self._storage.cas(FEED_KEY, raw, new.encode()):
                return
        raise StorageError("the change feed is too busy: the change was not published")

    # -- readers ------------------------------------------------------------------------------

    async def poll(self) -> None:
        """Read the feed once and drop what the new changes name. Raises ``StorageError``."""
        async with self._poll_lock:
            started = self.clock()
            raw = await self._storage.get(FEED_KEY)
            self._sync(raw)
            self._polled_at = max(self._polled_at, started)

    def _sync(self, raw: bytes | None) -> None:
        if self._synced and raw == self._raw:
            return
        state = _State.decode(raw) if raw is not None else None
        if raw is not None and state is None:
            logger.error("the change feed %s holds a value it cannot read", FEED_KEY)
        epoch, seq = (state.epoch, state.seq) if state is not None else ("", 0)
        missed = seq - self._seq
        if self._synced and not self._epoch and state is not None and seq == len(state.changes):
            # There was no feed at the last poll, and this one holds every change since it
            # was made: nothing was missed.
            self._apply(_parse(state.changes))
        elif not self._synced or epoch != self._epoch or missed < 0:
            self._reset("first poll" if not self._synced else "the feed was replaced")
        elif state is not None and missed > 0:
            if missed > len(state.changes):
                self._reset(f"{missed} changes since the last poll, over the feed's length")
            else:
                self._apply(_parse(state.changes[-missed:]))
        self._synced, self._epoch, self._seq, self._raw = True, epoch, seq, raw

    def _apply(self, changes: list[Change] | tuple[Change, ...]) -> None:
        self.version += 1
        for topic, ident in changes:
            for cache in self._caches.get(topic, ()):
                cache.drop(ident)

    def _reset(self, why: str) -> None:
        if self._synced:
            logger.info("change feed: dropping every cached account entry (%s)", why)
        self.version += 1
        for caches in self._caches.values():
            for cache in caches:
                cache.clear()

    # -- the background loop ------------------------------------------------------------------

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll now, report started, then every ``interval`` (or at ``wake``) until cancelled.
        With nothing cached and no listener, there is nothing to poll for: it returns."""
        if not self.caching and not self._listened:
            task_status.started()
            return
        await self._poll_logged()
        task_status.started()
        while True:
            await self._nap()
            self._wake = anyio.Event()
            await self._poll_logged()

    async def _nap(self) -> None:
        """Wait ``interval`` or until ``wake``. A clock with ``sleep_until`` (a test's
        ``FakeClock``) times the wait; otherwise it is real time."""
        sleep_until = getattr(self.clock, "sleep_until", None)
        if sleep_until is None:
            with anyio.move_on_after(self.interval):
                await self._wake.wait()
            return
        deadline = self.clock() + self.interval
        async with anyio.create_task_group() as tasks:

            async def alarm() -> None:
                await sleep_until(deadline)
                tasks.cancel_scope.cancel()

            tasks.start_soon(alarm)
            await self._wake.wait()
            tasks.cancel_scope.cancel()

    def wake(self) -> None:
        """Make the background loop poll now."""
        self._wake.set()

    async def next_poll(self, *, wake: bool = True) -> None:
        """Return once a poll begun after this call has ended (needs ``run`` running): the
        event tests await instead of sleeping. ``wake`` makes it poll now; without it, the
        poll comes when its time does."""
        target = self._begun + 1
        if wake:
            self.wake()
        while self._ended < target:
            await self._polled.wait()

    async def _poll_logged(self) -> None:
        self._begun += 1
        try:
            # A poll slower than the bound cannot keep the cache fresh; a stuck one would
            # stop the loop. (Cached entries are bypassed meanwhile either way.)
            with anyio.fail_after(max(self.cache_ttl, 1.0)):
                await self.poll()
        except Exception as exc:  # the loop must outlive any one poll
            if not self._failing:
                logger.warning(
                    "change feed poll failed (cached account entries stop being trusted "
                    "%.3g s after the last good poll): %r",
                    self.cache_ttl,
                    exc,
                    exc_info=not isinstance(exc, StorageError | TimeoutError),
                )
            self._failing = True
        else:
            if self._failing:
                logger.info("change feed polls work again")
            self._failing = False
        finally:
            self._ended += 1
            self._polled.set()
            self._polled = anyio.Event()


#: Every topic a cache listens to (a topic missing here would be published and never heard:
#: other instances would keep their copies until they age out).
_TOPICS: dict[str, Topic] = {topic: topic for topic in get_args(Topic)}


def _parse(entries: list[str]) -> list[Change]:
    """The changes of feed entries; a topic this version does not cache is skipped."""
    changes: list[Change] = []
    for entry in entries:
        name, _, ident = entry.partition(":")
        if (topic := _TOPICS.get(name)) is not None:
            changes.append((topic, ident))
    return changes
