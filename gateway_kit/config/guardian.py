"""Guardian: loop protection for runaway agents; one table per rule, overridable per plan and
per key.

Every rule has an ``action`` (what it does once tripped: ``block``, ``throttle``, ``warn``, or
``off``) and an optional ``mode`` of its own (``monitor`` to try a rule out while the others
enforce). The defaults are conservative: an ordinary chat application never trips them.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator

from gateway_kit.config.base import Mode, OnError, _Config

__all__ = [
    "RULE_NAMES",
    "ContextGrowthRule",
    "ContextSizeRule",
    "ConversationStepsRule",
    "GuardianConfig",
    "GuardianRules",
    "RepeatRule",
    "SpendSpikeRule",
    "ToolLoopRule",
    "merge_rules",
]

Action = Literal["block", "throttle", "warn", "off"]

#: The most any count or token threshold may be: well past any real use, and within what a
#: storage counter holds (a threshold past 64 bits made every request a 500).
_MOST = 10**12


class _Rule(_Config):
    #: What the rule does once tripped.
    action: Action = "block"
    #: This rule's own mode (``monitor``: say what it would do, never act; ``off``: the rule
    #: is off, whatever its action); default: ``guardian.mode``.
    mode: Mode | None = None

    @property
    def acting(self) -> Action:
        """What the rule does once tripped: its ``action``, or ``off`` when its own mode is."""
        return "off" if self.mode is Mode.OFF else self.action


class ContextSizeRule(_Rule):
    """A prompt above a share of the model's context window (413)."""

    #: The share of the model's context window a prompt may fill (the configured
    #: ``context_window``, else the price table's).
    window_share: float = Field(default=0.95, gt=0, le=1)
    #: The threshold for models whose context window is unknown.
    max_tokens: int = Field(default=1_000_000, ge=1, le=_MOST)


class RepeatRule(_Rule):
    """The same canonical request from the same key, again and again within a window."""

    action: Action = "throttle"
    #: Counted from the first of them: a cron sending one prompt every minute is throttled
    #: at its 10th call, and every 10 minutes after.
    window_s: float = Field(default=600.0, gt=0, le=86_400)
    #: The request that many times within the window is throttled (held ``window_s /
    #: throttle_at`` per repeat past it, refused once that passes ``throttle_max_wait_s``)...
    throttle_at: int = Field(default=10, ge=2, le=_MOST)
    #: ...and from this many times on, blocked (429 with Retry-After).
    block_at: int = Field(default=20, ge=2, le=_MOST)

    @model_validator(mode="after")
    def _check_order(self) -> RepeatRule:
        if self.block_at < self.throttle_at:
            raise ValueError("block_at must be at least throttle_at")
        return self


class ToolLoopRule(_Rule):
    """From the request's own history: an agent calling the same tool over and over."""

    #: Consecutive assistant turns calling the same tools with the same arguments.
    identical_turns: int = Field(default=5, ge=2, le=_MOST)
    #: Two tool turns alternating (A, B, A, B...): this many A-B cycles in a row.
    ping_pong_cycles: int = Field(default=4, ge=2, le=_MOST)
    #: The same tool answering the same error this many times in a row.
    repeated_errors: int = Field(default=4, ge=2, le=_MOST)


class ConversationStepsRule(_Rule):
    """Requests of one conversation (``x-conversation-id``, else its first messages) in a
    window."""

    action: Action = "throttle"
    window_s: float = Field(default=600.0, gt=0, le=86_400)
    max_steps: int = Field(default=150, ge=2, le=_MOST)


class ContextGrowthRule(_Rule):
    """A context that keeps growing without new user input: the prompt at least ``factor``
    times what it was at the last user message, and at least ``min_tokens``, after at least
    ``min_turns`` assistant turns."""

    factor: float = Field(default=4.0, gt=1, le=_MOST)
    min_tokens: int = Field(default=50_000, ge=1, le=_MOST)
    min_turns: int = Field(default=10, ge=1, le=_MOST)


class SpendSpikeRule(_Rule):
    """A key spending far faster than its own recent average."""

    action: Action = "throttle"
    #: The recent window whose spend rate is compared with the key's average over about a
    #: day (yesterday and today so far).
    window_s: float = Field(default=300.0, ge=60, le=3600)
    factor: float = Field(default=10.0, gt=1, le=_MOST)
    #: Never a spike below this much spent in the recent window (a new key's first dollars).
    floor_usd: Decimal = Field(default=Decimal(5), ge=0, le=10**9)


class GuardianRules(_Config):
    context_size: ContextSizeRule = Field(default_factory=ContextSizeRule)
    repeat: RepeatRule = Field(default_factory=RepeatRule)
    tool_loop: ToolLoopRule = Field(default_factory=ToolLoopRule)
    conversation_steps: ConversationStepsRule = Field(default_factory=ConversationStepsRule)
    context_growth: ContextGrowthRule = Field(default_factory=ContextGrowthRule)
    spend_spike: SpendSpikeRule = Field(default_factory=SpendSpikeRule)


RULE_NAMES: tuple[str, ...] = tuple(GuardianRules.model_fields)


def merge_rules(rules: GuardianRules, overrides: dict[str, dict[str, Any]]) -> GuardianRules:
    """``rules`` with ``overrides`` (rule name to the fields it changes) applied, validated
    as a whole (``ValueError`` naming the rule and field otherwise)."""
    unknown = sorted(set(overrides) - set(RULE_NAMES))
    if unknown:
        raise ValueError(f"{unknown[0]}: no such rule (rules: {', '.join(RULE_NAMES)})")
    merged = rules.model_dump()
    for name, fields in overrides.items():
        if not isinstance(fields, dict):
            raise ValueError(f"{name}: expected a table of the rule's fields")
        merged[name] = {**merged[name], **fields}
    try:
        return GuardianRules.model_validate(merged)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ValueError(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None


class GuardianConfig(_Config):
    """Guardian: loop protection (``layers.guardian``)."""

    mode: Mode = Mode.ENFORCE
    #: When storage fails: ``open`` serves the request with the stateless rules only.
    on_error: OnError = OnError.OPEN
    rules: GuardianRules = Field(default_factory=GuardianRules)
    #: The longest a throttled request is held before it is served; one that would wait
    #: longer is refused (429, ``Retry-After``).
    throttle_max_wait_s: float = Field(default=10.0, ge=0, le=60)
    #: ``guardian.block`` is published once per rule, key and episode: this long after an
    #: event, the same rule tripping for the same key again is the same episode.
    episode_s: float = Field(default=600.0, gt=0, le=86_400)
    #: The key of ``request_hash`` (an HMAC, so that a short prompt cannot be recovered from
    #: its hash by trying a dictionary). Unset: one is drawn at random once and kept in the
    #: storage, shared by every gateway on it.
    hash_secret: SecretStr | None = None
    #: The header a client may name its conversation with (``conversation_steps``).
    conversation_header: str = "x-conversation-id"
