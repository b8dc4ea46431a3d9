"""Token usage of one model call, normalised so that every token is counted exactly once.

Providers report usage in different shapes. OpenAI's ``prompt_tokens`` already includes the
cached prompt tokens and ``completion_tokens`` already includes the reasoning tokens; Anthropic's
``input_tokens`` leaves out the tokens read from and written to its prompt cache, which come in
separate fields. ``Usage`` holds the totals (``input_tokens``, ``output_tokens``) and the parts
that are billed at another rate (``cache_read_tokens`` and ``cache_write_tokens`` within the
input, ``reasoning_tokens`` within the output), which is also how genai-prices reads usage.

The parsers take the provider's ``usage`` object as JSON (a mapping) or as an SDK object (read
by attribute) and never raise: a missing, negative or non-integer total gives ``None`` (there is
nothing trustworthy to bill), a malformed detail counts as 0 and a detail larger than its total
is capped at the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one call; the cache and reasoning counts are parts of the totals."""

    #: Every prompt token, cached ones included.
    input_tokens: int
    #: Every completion token, reasoning included.
    output_tokens: int
    #: Prompt tokens read from the provider's cache (part of ``input_tokens``).
    cache_read_tokens: int = 0
    #: Prompt tokens written to the provider's cache (part of ``input_tokens``).
    cache_write_tokens: int = 0
    #: Hidden reasoning tokens (part of ``output_tokens``), billed as output.
    reasoning_tokens: int = 0
    #: ``True`` for a local estimate (before the call, or when the provider reported nothing).
    estimated: bool = False

    def __post_init__(self) -> None:
        if (
            min(
                self.input_tokens,
                self.output_tokens,
                self.cache_read_tokens,
                self.cache_write_tokens,
                self.reasoning_tokens,
            )
            < 0
        ):
            raise ValueError(f"token counts must not be negative: {self!r}")
        if self.cache_read_tokens + self.cache_write_tokens > self.input_tokens:
            raise ValueError(f"cache tokens are part of input_tokens: {self!r}")
        if self.reasoning_tokens > self.output_tokens:
            raise ValueError(f"reasoning tokens are part of output_tokens: {self!r}")

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @classmethod
    def estimate(cls, input_tokens: int, output_tokens: int = 0) -> Usage:
        """A local estimate, flagged ``estimated=True``; negative counts become 0."""
        return cls(max(0, input_tokens), max(0, output_tokens), estimated=True)

    @classmethod
    def from_openai(cls, usage: Any) -> Usage | None:
        """An OpenAI chat-completions ``usage`` object, or ``None`` when it is unusable.

        ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens`` (and the prompt
        cache writes some providers report as ``prompt_tokens_details.cache_creation_tokens``,
        as the Anthropic provider does) and ``completion_tokens`` includes
        ``completion_tokens_details.reasoning_tokens``. An embeddings ``usage``
        (``prompt_tokens`` and ``total_tokens``, no ``completion_tokens``) has no output.
        """
        prompt = _count(_field(usage, "prompt_tokens"))
        reported = _field(usage, "completion_tokens")
        completion = _count(reported)
        total = _count(_field(usage, "total_tokens"))
        if reported is None and prompt is not None and total is not None:
            completion = max(0, total - prompt)  # an embeddings usage
        if prompt is None or completion is None:
            return None
        details = _field(usage, "prompt_tokens_details")
        cached = min(_detail(_field(details, "cached_tokens")), prompt)
        written = min(_detail(_field(details, "cache_creation_tokens")), prompt - cached)
        reasoning = _detail(_field(_field(usage, "completion_tokens_details"), "reasoning_tokens"))
        return cls(
            prompt,
            completion,
            cache_read_tokens=cached,
            cache_write_tokens=written,
            reasoning_tokens=min(reasoning, completion),
        )

    @classmethod
    def from_anthropic(cls, usage: Any) -> Usage | None:
        """An Anthropic messages ``usage`` object, or ``None`` when it is unusable.

        Anthropic's ``input_tokens`` excludes ``cache_read_input_tokens`` and
        ``cache_creation_input_tokens``; they are added back so that ``input_tokens`` is the
        whole prompt. ``output_tokens`` includes thinking tokens
        (``output_tokens_details.thinking_tokens`` when reported).
        """
        uncached = _count(_field(usage, "input_tokens"))
        output = _count(_field(usage, "output_tokens"))
        if uncached is None or output is None:
            return None
        cache_read = _detail(_field(usage, "cache_read_input_tokens"))
        cache_write = _detail(_field(usage, "cache_creation_input_tokens"))
        thinking = _detail(_field(_field(usage, "output_tokens_details"), "thinking_tokens"))
        return cls(
            uncached + cache_read + cache_write,
            output,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=min(thinking, output),
        )


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` for a mapping, ``obj.name`` for an SDK object, ``None`` otherwise."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _count(value: Any) -> int | None:
    """A non-negative whole number of tokens (``3`` or ``3.0``), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def _detail(value: Any) -> int:
    """An optional breakdown count: anything unusable counts as 0."""
    count = _count(value)
    return 0 if count is None else count
