"""``PIIPolicy``: what masking covers in a chat request, and the verdict. No ASGI here.

Covered: every message's text (a string, or its text and refusal parts), its ``name``, an
assistant's refusal and thinking (``reasoning_content``, ``reasoning``), its tool-call
arguments and legacy ``function_call``'s (inside the JSON's string values: the JSON stays
valid), tool results, system and developer prompts (``mask_system``), the request's ``user``,
``metadata`` values and ``prediction``, and tool descriptions with their parameters' schema
texts (``mask_tool_descriptions``). The request is rewritten as a copy: the parsed original,
with the raw values, is dropped with the request.

Placeholder-like text anywhere in the request (``email_1``, ``{EMAIL_1}``: any form restoring
accepts) is reserved before anything is masked, so the placeholder it names is never issued.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway_kit._memo import Memo
from gateway_kit.config.pii import PIIConfig
from gateway_kit.layers.pii.detectors import BuiltinDetector, Detector, PatternDetector, Span
from gateway_kit.layers.pii.masking import Vault, apply_spans, find_spans, shaped_names
from gateway_kit.pipeline.verdicts import Verdict

__all__ = ["PIIPolicy", "PIIVerdict"]

_SYSTEM = frozenset({"system", "developer"})
#: A message's texts besides its content: an assistant's refusal and thinking.
_MESSAGE_TEXTS = ("refusal", "reasoning_content", "reasoning")
#: The request's fields that name its end user (an e-mail address, often).
_IDENTIFIERS = ("user", "safety_identifier", "prompt_cache_key")
#: A content part's text: a text part's, a refusal part's.
_PART_TEXTS = ("text", "refusal")
#: A tool's parameters (JSON Schema): the keywords whose values are text the model reads.
_SCHEMA_TEXTS = frozenset({"description", "title", "default", "examples", "enum", "const"})
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
        #: The placeholder-like names texts hold (``shaped_names``), remembered the same way.
        self._names: Memo[tuple[int, int], tuple[str, ...]] = Memo(_MEMO_SIZE)

    def mask(self, payload: dict[str, Any], vault: Vault) -> dict[str, Any]:
        """A copy of ``payload`` with what it covers masked into ``vault``; a detector's
        exception propagates (the layer's ``on_error`` decides)."""
        config = self.config
        self._reserve(payload, vault)
        masked = dict(payload)
        messages = payload.get("messages")
        if isinstance(messages, list):
            masked["messages"] = [
                self._message(m, vault)
                if isinstance(m, dict) and (config.mask_system or m.get("role") not in _SYSTEM)
                else m
                for m in messages
            ]
        tools = payload.get("tools")
        if config.mask_tool_descriptions and isinstance(tools, list):
            masked["tools"] = [self._tool(tool, vault) for tool in tools]
        self._fields(payload, masked, vault)
        stop = payload.get("stop")  # the model writes the placeholder: it must stop there
        if isinstance(stop, str):
            masked["stop"] = self._text(stop, vault)
        elif isinstance(stop, list):
            masked["stop"] = [self._text(s, vault) if isinstance(s, str) else s for s in stop]
        prediction = payload.get("prediction")
        if isinstance(prediction, dict) and "content" in prediction:
            masked["prediction"] = {
                **prediction,
                "content": self._content(prediction["content"], vault),
            }
        return masked

    def mask_input(self, payload: dict[str, Any], vault: Vault) -> dict[str, Any]:
        """An embeddings request: its ``input`` texts masked (token ids are left alone). Nothing
        is restored in an answer of vectors: nothing is reserved."""
        masked = dict(payload)
        value = payload.get("input")
        if isinstance(value, str):
            masked["input"] = self._text(value, vault)
        elif isinstance(value, list) and any(isinstance(item, str) for item in value):
            texts = [self._text(item, vault) if isinstance(item, str) else item for item in value]
            masked["input"] = texts
        self._fields(payload, masked, vault)
        return masked

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

    def _fields(self, payload: dict[str, Any], masked: dict[str, Any], vault: Vault) -> None:
        """The request's own texts, into ``masked``: the end user's identifiers (``user``, its
        successor ``safety_identifier``, ``prompt_cache_key``) and ``metadata``'s values."""
        self._texts(payload, masked, _IDENTIFIERS, vault)
        metadata = payload.get("metadata")
        if isinstance(metadata, dict):
            masked["metadata"] = {
                key: self._text(value, vault) if isinstance(value, str) else value
                for key, value in metadata.items()
            }

    def _texts(
        self, source: dict[str, Any], into: dict[str, Any], names: Sequence[str], vault: Vault
    ) -> None:
        """``source``'s string fields of ``names``, masked into ``into``."""
        for name in names:
            text = source.get(name)
            if isinstance(text, str):
                into[name] = self._text(text, vault)

    def _content(self, content: Any, vault: Vault) -> Any:
        """A message's content (or a prediction's): a string, or parts with texts."""
        if isinstance(content, str):
            return self._text(content, vault)
        if isinstance(content, list):
            return [self._part(part, vault) for part in content]
        return content

    def _part(self, part: Any, vault: Vault) -> Any:
        if not isinstance(part, dict):
            return part
        out = part
        for key in _PART_TEXTS:
            text = part.get(key)
            if isinstance(text, str):
                out = {**out, key: self._text(text, vault)}
        return out

    def _message(self, message: dict[str, Any], vault: Vault) -> dict[str, Any]:
        out = dict(message)
        if "content" in message:
            out["content"] = self._content(message["content"], vault)
        self._texts(message, out, _MESSAGE_TEXTS, vault)
        name = message.get("name")
        if isinstance(name, str):
            masked = self._text(name, vault)
            # OpenAI's names are [A-Za-z0-9_-]: a placeholder goes in without its brackets
            # (restore knows the bare form of every placeholder it issued).
            out["name"] = masked if masked == name else masked.replace("<", "").replace(">", "")
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            out["tool_calls"] = [self._call(call, vault) for call in calls]
        if "function_call" in message:  # the legacy form of one call
            out["function_call"] = self._function(message["function_call"], vault)
        return out

    def _call(self, call: Any, vault: Vault) -> Any:
        if not isinstance(call, dict) or "function" not in call:
            return call
        return {**call, "function": self._function(call["function"], vault)}

    def _function(self, function: Any, vault: Vault) -> Any:
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            return function
        return {**function, "arguments": self._arguments(function["arguments"], vault)}

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
        if not isinstance(function, dict):
            return tool
        described = dict(function)
        if isinstance(function.get("description"), str):
            described["description"] = self._text(function["description"], vault)
        if "parameters" in function:
            described["parameters"] = self._schema(function["parameters"], vault)
        return {**tool, "function": described}

    def _schema(self, schema: Any, vault: Vault) -> Any:
        """A JSON Schema with the texts the model reads masked (descriptions, titles, defaults,
        examples, enums and consts, at any depth); its keywords and property names kept."""
        if isinstance(schema, list):
            return [self._schema(item, vault) for item in schema]
        if not isinstance(schema, dict):
            return schema
        return {
            key: self._strings(value, vault) if key in _SCHEMA_TEXTS else self._schema(value, vault)
            for key, value in schema.items()
        }

    def _reserve(self, payload: dict[str, Any], vault: Vault) -> None:
        """Placeholders the client wrote itself, anywhere in the request (masked or not: the
        model may repeat any of it), are never issued (see ``Vault.reserve``)."""
        names = self._names
        pending: list[Any] = [payload]
        while pending:  # a loop, not recursion: a call per value cost as much as the rest
            value = pending.pop()
            if type(value) is str:
                if "_" in value:
                    key = (hash(value), len(value))
                    found = names.get(key)
                    if found is None:
                        found = shaped_names(value)
                        names.remember(key, found)
                    if found:
                        vault.reserve_names(found)
            elif type(value) is dict:
                pending += value.values()
            elif type(value) is list:
                pending += value
