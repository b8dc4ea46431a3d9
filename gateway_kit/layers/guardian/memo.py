"""Guardian's two memories of messages already worked out, so that an agent re-sending its whole
history on every turn costs the new messages' work, not the history's.

- ``MessageMemo``: each message's facts, by a fingerprint of the message (Python's string
  hashes, keyed per process: strings are hashed in C). Any conversation, in any order.
- ``Prefixes``: for recent long conversations, the last request's messages as parsed and
  what was worked out of them. The next request of that conversation starts with the same
  messages: one comparison in C (lengths, then the bytes) stands for hashing them all again.
  A request that parts from the last one (a retry, an edited history) reuses the messages
  before the first that differs.

Both are bounded and used on the event loop only (no lock).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from gateway_kit._memo import Memo

__all__ = ["MessageMemo", "Prefixes"]

S = TypeVar("S")

_RUN = 16


#: Each message's facts, by its fingerprint.
MessageMemo = Memo


class Prefixes(Generic[S]):
    """The last request of up to ``conversations`` conversations, least recently used dropped
    first, and no more than ``weight`` in all (the states' weights: Guardian's are estimated
    tokens, so the messages held stay within a few times that many bytes)."""

    def __init__(self, *, conversations: int, weight: int) -> None:
        self._entries: OrderedDict[int, tuple[list[Any], S, int]] = OrderedDict()
        self._conversations = conversations
        self._limit = weight
        self._weight = 0

    def find(self, key: int, messages: Sequence[Any]) -> tuple[int, S | None]:
        """How many of ``messages`` the conversation's last request began with, and what was
        kept of that request; ``(0, None)`` when the conversation is unknown."""
        entry = self._entries.get(key)
        if entry is None:
            return 0, None
        previous, state, _ = entry
        self._entries.move_to_end(key)
        count = len(previous)
        if count < len(messages) and messages[:count] == previous:
            return count, state  # the next turn: the last request and more
        # Another branch of the history (a retry, an edit): where they part, found comparing
        # runs of messages in C, then the messages of the run that differs.
        same, limit = 0, min(count, len(messages))
        while same < limit:
            end = min(same + _RUN, limit)
            if messages[same:end] != previous[same:end]:
                while messages[same] == previous[same]:
                    same += 1
                break
            same = end
        return same, state

    def remember(self, key: int, messages: Sequence[Any], state: S, weight: int) -> None:
        """``state``, of ``messages``, as the conversation's last request (``state`` must not
        change from now on: ``find`` hands it out as it is)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._weight -= old[2]
        if weight > self._limit:
            return
        self._entries[key] = (list(messages), state, weight)
        self._weight += weight
        while len(self._entries) > self._conversations or self._weight > self._limit:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._weight -= dropped

    def __len__(self) -> int:
        return len(self._entries)
