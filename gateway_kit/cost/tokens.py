"""Token estimates made before a call, locally and offline: the prompt, and the likely output.

Budget Control reserves a call's cost before it starts, when nothing has counted its tokens
yet. No tokenizer is loaded (tiktoken fetches its BPE files from the network on first use), so
the prompt is estimated with a rule fitted to OpenAI's ``o200k_base`` encoding (gpt-4o, gpt-4.1,
o-series), and the output is estimated from the outputs each model gave recently.
"""

from __future__ import annotations

import json
import math
import string
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any

#: A high- or auto-detail image: 85 base tokens + 170 per 512 px tile, four tiles for the
#: 768 x 768 that a square image is scaled to. Larger, oblong images cost up to 1,445.
IMAGE_TOKENS = 765
#: A low-detail image: the base 85 tokens, whatever its size.
LOW_DETAIL_IMAGE_TOKENS = 85
#: Per message: its start, separator and end markers (the cookbook's ``tokens_per_message``).
MESSAGE_TOKENS = 3
#: Every reply is primed with the start of an assistant message.
REPLY_TOKENS = 3
#: The framing of one tool call (its name and arguments are counted as text on top).
TOOL_CALL_TOKENS = 4
#: Tool definitions: once for the block, then per function, after the cookbook's gpt-4o
#: figures. Each definition's JSON is counted on top; it is longer than the TypeScript-like
#: text the model sees, which covers the cookbook's per-property and per-enum-item extras.
TOOLS_TOKENS = 12
FUNCTION_TOKENS = 7

_SYMBOLS = string.punctuation.encode()
_DIGITS = string.digits.encode()


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text`` for ``o200k_base``, slightly over-estimated for typical text.

    ``ceil((bytes + symbols + 3 * digits - double_spaces) / 4)`` over the UTF-8 bytes: OpenAI's
    rule of thumb of about 4 bytes a token, plus a quarter token more for each ASCII punctuation
    byte (symbols seldom merge into longer tokens, which is why bytes alone under-count JSON and
    code by up to 20 %), plus three quarters more for each digit (numbers split into groups of
    at most three digits that rarely merge with their neighbours: ids, dates, hashes), less a
    quarter for each pair of spaces (indentation merges into few tokens). Fitted against
    ``o200k_base`` counts of English prose, Markdown, Python, JavaScript and JSON (about 700 kB):
    the estimate is within 0.9x to 1.45x of the true count for every 2 kB sample, and 1.03x to
    1.15x for each of those kinds of text as a whole. CJK text comes out about 1.05x, accented
    Latin 1.1x; Cyrillic and other two-byte scripts are over-estimated 2x to 2.5x. Four passes
    over the bytes in C (some 6 µs a kilobyte), no per-word Python loop: a regex tokenisation is
    ten times slower.
    """
    return -(-_quarters(text) // 4)


def _quarters(text: str) -> int:
    """The estimate in quarter tokens, so that a request's pieces are rounded once, in total."""
    data = text.encode("utf-8", "surrogatepass")
    size = len(data)
    symbols = size - len(data.translate(None, _SYMBOLS))
    digits = size - len(data.translate(None, _DIGITS))
    return size + symbols + 3 * digits - data.count(b"  ")


def estimate_prompt_tokens(request: Mapping[str, Any], *, image_tokens: int = IMAGE_TOKENS) -> int:
    """Prompt tokens of an OpenAI chat-completions request, estimated offline.

    Counts every message (framing, role, name, text, images, tool calls and their ids), tool
    and legacy function definitions and a JSON schema response format, as OpenAI's cookbook
    counts them; text by ``estimate_text_tokens``, rounded up once for the whole request.
    Content parts other than text and images (audio, files) count as their JSON, which
    over-estimates binary payloads. Malformed fields are skipped, never raised on. An
    embeddings request counts its ``input``: text estimated the same way, token ids one each.
    """
    if "messages" not in request and "input" in request:
        return _input_tokens(request["input"])
    quarters = 4 * REPLY_TOKENS
    messages = request.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, Mapping):
                quarters += _message_quarters(message, image_tokens)
    tools = request.get("tools")
    functions = [
        tool.get("function")
        for tool in (tools if isinstance(tools, list) else ())
        if isinstance(tool, Mapping)
    ]
    legacy = request.get("functions")
    if isinstance(legacy, list):
        functions += legacy
    defined = [function for function in functions if isinstance(function, Mapping)]
    if defined:
        quarters += 4 * TOOLS_TOKENS
        for function in defined:
            quarters += 4 * FUNCTION_TOKENS + _quarters(_json(function))
    response_format = request.get("response_format")
    if isinstance(response_format, Mapping):
        schema = response_format.get("json_schema")
        if isinstance(schema, Mapping):
            quarters += 4 * FUNCTION_TOKENS + _quarters(_json(schema))
    return -(-quarters // 4)


def estimate_message_tokens(message: Mapping[str, Any], *, image_tokens: int = IMAGE_TOKENS) -> int:
    """One message's share of ``estimate_prompt_tokens`` (its framing included), rounded up."""
    return -(-_message_quarters(message, image_tokens) // 4)


def _input_tokens(value: Any) -> int:
    """The tokens of an embeddings ``input``: text, texts, token ids, or lists of token ids."""
    if isinstance(value, str):
        return -(-_quarters(value) // 4)
    if not isinstance(value, list):
        return 0
    tokens = 0
    for item in value:
        if isinstance(item, str):
            tokens += -(-_quarters(item) // 4)
        elif isinstance(item, list):
            tokens += len(item)
        else:
            tokens += 1  # one token id
    return tokens


def _message_quarters(message: Mapping[str, Any], image_tokens: int) -> int:
    # Every role the API accepts is one token.
    quarters = 4 * (MESSAGE_TOKENS + 1)
    name = message.get("name")
    if isinstance(name, str):
        quarters += 4 + _quarters(name)  # the cookbook's tokens_per_name
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str):
        quarters += _quarters(call_id)
    content = message.get("content")
    if isinstance(content, str):
        quarters += _quarters(content)
    elif isinstance(content, list):
        for part in content:
            quarters += _part_quarters(part, image_tokens)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, Mapping):
                quarters += _call_quarters(call.get("function"))
    if "function_call" in message:
        quarters += _call_quarters(message.get("function_call"))
    return quarters


def _part_quarters(part: Any, image_tokens: int) -> int:
    if isinstance(part, str):
        return _quarters(part)
    if not isinstance(part, Mapping):
        return 0
    kind = part.get("type")
    if kind == "text" or kind == "refusal":
        text = part.get(kind)
        return _quarters(text) if isinstance(text, str) else 0
    if kind == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return 4 * (LOW_DETAIL_IMAGE_TOKENS if detail == "low" else image_tokens)
    return _quarters(_json(part))


def _call_quarters(function: Any) -> int:
    if not isinstance(function, Mapping):
        return 0
    quarters = 4 * TOOL_CALL_TOKENS
    for key in ("name", "arguments"):
        value = function.get(key)
        if isinstance(value, str):
            quarters += _quarters(value)
        elif value is not None:
            quarters += _quarters(_json(value))
    return quarters


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


class OutputEstimator:
    """Likely output tokens per model, learnt from the outputs it gave recently.

    The estimate reserves budget before a call, so it aims high rather than at the average:
    the ``quantile`` (default p90, nearest rank) of the model's last ``window`` outputs. Until a
    model has ``min_observations`` outputs, the ``prior`` stands in. The request's
    ``max_completion_tokens`` or ``max_tokens`` caps it (a call cannot exceed them), and ``n``
    choices multiply it. At most ``max_models`` models are tracked; the one observed least
    recently is forgotten first. Safe to share between threads and tasks.
    """

    def __init__(
        self,
        *,
        prior: int = 512,
        quantile: float = 0.9,
        window: int = 100,
        min_observations: int = 5,
        max_models: int = 1024,
    ) -> None:
        if prior < 0:
            raise ValueError(f"prior must not be negative, got {prior}")
        if not 0 < quantile <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {quantile}")
        if window < 1 or max_models < 1 or min_observations < 1:
            raise ValueError("window, min_observations and max_models must be at least 1")
        self._prior = prior
        self._quantile = quantile
        self._window = window
        self._min_observations = min(min_observations, window)
        self._max_models = max_models
        self._models: OrderedDict[str, _Outputs] = OrderedDict()
        self._lock = threading.Lock()

    def estimate(self, model: str, request: Mapping[str, Any] | None = None) -> int:
        """Output tokens to reserve for ``request`` on ``model``."""
        with self._lock:
            outputs = self._models.get(model)
            if outputs is None or len(outputs.samples) < self._min_observations:
                tokens = self._prior
            else:
                tokens = outputs.quantile(self._quantile)
        if request is None:
            return tokens
        for field in ("max_completion_tokens", "max_tokens"):
            cap = _positive_int(request.get(field))
            if cap is not None:
                tokens = min(tokens, cap)
        choices = _positive_int(request.get("n"))
        return tokens if choices is None else tokens * choices

    def observe(self, model: str, output_tokens: int) -> None:
        """Record the output tokens (reasoning included) of one completed choice."""
        if isinstance(output_tokens, bool) or not isinstance(output_tokens, int):
            return
        if output_tokens < 0:
            return
        with self._lock:
            outputs = self._models.get(model)
            if outputs is None:
                if len(self._models) >= self._max_models:
                    self._models.popitem(last=False)
                outputs = self._models[model] = _Outputs(self._window)
            else:
                self._models.move_to_end(model)
            outputs.add(output_tokens)


class _Outputs:
    """One model's recent outputs, with the quantile computed once per change."""

    __slots__ = ("_cached", "samples")

    def __init__(self, window: int) -> None:
        self.samples: deque[int] = deque(maxlen=window)
        self._cached: int | None = None

    def add(self, tokens: int) -> None:
        self.samples.append(tokens)
        self._cached = None

    def quantile(self, q: float) -> int:
        if self._cached is None:
            ordered = sorted(self.samples)
            self._cached = ordered[max(0, math.ceil(q * len(ordered)) - 1)]
        return self._cached


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
