"""``PIIPolicy``: what masking covers in a chat request, and the verdict. No ASGI here.

Covered: every message's text (a string, or its text parts), its ``name``, an assistant's
tool-call arguments (inside the JSON's string values: the JSON stays valid), tool results,
system and developer prompts (``mask_system``) and tool descriptions
(``mask_tool_descriptions``). The request is rewritten as a copy: the parsed original, with the
raw values, is dropped with the request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway_kit._memo import Memo
from gateway_kit.config.pii import PIIConfig
from gateway_kit.layers.pii.detectors import BuiltinDetector, Detector, PatternDetector, Span
from gateway_kit.layers.pii.masking import Vault, apply_spans, find_spans
from gateway_kit.pipeline.verdicts import Verdict

__all__ = ["PIIPolicy", "PIIVerdict"]

_SYSTEM = frozenset({"system", "developer"})
#: Texts whose spans are remembered.
_MEMO_SIZE = 20_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PIIVerdict(Verdict):
    """``masked`` (values replaced), ``found`` (monitor: counted, not replaced), ``pass``
    (nothing found), ``unchecked`` (a detector failed, ``on_error = open``)."""

    #: Values found, by kind (every occurrence; never the values).
    counts: dict[str, int] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        return {"counts": self.counts} if self.counts else {}

    def header(self) -> bytes:
        """``x-gateway-pii``: ``masked EMAIL=2 PHONE=1``."""
        figures = " ".join(f"{kind}={count}" for kind, count in sorted(self.counts.items()))
        return f"{self.action} {figures}".strip().encode()


class PIIPolicy:
    """The detectors of a configuration, and masking a request with them."""

    def __init__(self, config: PIIConfig, detectors: Sequence[Detector] | None = None) -> None:
        self.config = config
        if detectors is None:
            built: list[Detector] = [
                BuiltinDetector(config.kinds, phone_region=config.phone_region)
            ]
            if config.patterns:
                built.append(PatternDetector(config.patterns))
            detectors = built
        self.detectors = list(detectors)
        self.allow = frozenset(config.allow)
        self._spans: Memo[tuple[int, int], tuple[Span, ...]] = Memo(_MEMO_SIZE)

    def mask(self, payload: dict[str, Any], vault: Vault) -> dict[str, Any]:
        """A copy of ``payload`` with what it covers masked into ``vault``; a detector's
        exception propagates (the layer's ``on_error`` decides)."""
        config = self.config
        masked = dict(payload)
        messages = payload.get("messages")
        if isinstance(messages, list):
            for message in messages:
                _reserve(message, vault)
            masked["messages"] = [
                self._message(m, vault)
                if isinstance(m, dict) and (config.mask_system or m.get("role") not in _SYSTEM)
                else m
                for m in messages
            ]
        tools = payload.get("tools")
        if config.mask_tool_descriptions and isinstance(tools, list):
            masked["tools"] = [self._tool(tool, vault) for tool in tools]
        return masked

    def mask_input(self, payload: dict[str, Any], vault: Vault) -> dict[str, Any]:
        """An embeddings request: its ``input`` texts masked (token ids are left alone)."""
        value = payload.get("input")
        if isinstance(value, str):
            return {**payload, "input": self._text(value, vault)}
        if isinstance(value, list) and any(isinstance(item, str) for item in value):
            texts = [self._text(item, vault) if isinstance(item, str) else item for item in value]
            return {**payload, "input": texts}
        return payload

    def verdict(self, vault: Vault, *, rewrote: bool) -> PIIVerdict:
        counts = dict(vault.counts)
        if not counts:
            return PIIVerdict(action="pass")
        return PIIVerdict(action="masked" if rewrote else "found", counts=counts)

    # -- the parts of a request ------------------------------------------------------------------

    def _text(self, text: str, vault: Vault) -> str:
        # Where a text's values are, remembered by the text's fingerprint (a client re-sends
        # its history on every turn): positions and kinds only, never a value.
        key = (hash(text), len(text))
        spans = self._spans.get(key)
        if spans is None:
            spans = find_spans(text, self.detectors)
            self._spans.remember(key, spans)
        return apply_spans(text, spans, vault, allow=self.allow) if spans else text

    def _message(self, message: dict[str, Any], vault: Vault) -> dict[str, Any]:
        out = dict(message)
        content = message.get("content")
        if isinstance(content, str):
            out["content"] = self._text(content, vault)
        elif isinstance(content, list):
            out["content"] = [
                {**part, "text": self._text(part["text"], vault)}
                if isinstance(part, dict) and isinstance(part.get("text"), str)
                else part
                for part in content
            ]
        name = message.get("name")
        if isinstance(name, str):
            masked = self._text(name, vault)
            # OpenAI's names are [A-Za-z0-9_-]: a placeholder goes in without its brackets
            # (restore knows the bare form of every placeholder it issued).
            out["name"] = masked if masked == name else masked.replace("<", "").replace(">", "")
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            out["tool_calls"] = [self._call(call, vault) for call in calls]
        return out

    def _call(self, call: Any, vault: Vault) -> Any:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            return call
        arguments = self._arguments(function["arguments"], vault)
        return {**call, "function": {**function, "arguments": arguments}}

    def _arguments(self, arguments: str, vault: Vault) -> str:
        """Tool-call arguments: the JSON's string values masked, the JSON kept valid (text
        that is not JSON is masked as text)."""
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return self._text(arguments, vault)
        return json.dumps(self._strings(parsed, vault), ensure_ascii=False)

    def _strings(self, value: Any, vault: Vault) -> Any:
        if isinstance(value, str):
            return self._text(value, vault)
        if isinstance(value, list):
            return [self._strings(item, vault) for item in value]
        if isinstance(value, dict):
            return {key: self._strings(item, vault) for key, item in value.items()}
        return value

    def _tool(self, tool: Any, vault: Vault) -> Any:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("description"), str):
            return tool
        described = {**function, "description": self._text(function["description"], vault)}
        return {**tool, "function": described}


def _reserve(message: Any, vault: Vault) -> None:
    """Placeholders the client wrote itself are never issued (see ``Vault.reserve``)."""
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        vault.reserve(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                vault.reserve(part["text"])
