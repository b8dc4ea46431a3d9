"""``RestoreTransform``: the answer with the request's placeholders given back their values.

A JSON answer is restored whole: each choice's text fields (the content, a refusal, a reasoning
model's thinking: ``reasoning_content`` or ``reasoning``) and each tool call's arguments (JSON:
there a value is given back escaped as a JSON string's content, ``in_json_strings``). A
stream is restored event by event, one ``StreamRestorer`` per choice's text field and per
choice's tool call (by index), so ordinary text passes at once and only what could still become
a placeholder waits for the next event; what is held goes out when the choice moves on to
another text field (from its thinking to its answer), with its ``finish_reason``, else before
``[DONE]``, else when the stream ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway_kit.layers.pii.restore import StreamRestorer, in_json_strings, restore_text
from gateway_kit.pipeline.transforms import JSONBody, ResponseTransform
from gateway_kit.sse import SSEEvent

__all__ = ["RestoreTransform"]


class RestoreTransform(ResponseTransform):
    """``json_content``: the answer's content is JSON (structured output), restored as tool
    calls' arguments are (a private key's newlines went back raw into a JSON string, and the
    SDK's parse failed on the answer)."""

    def __init__(self, values: dict[str, str], *, json_content: bool = False) -> None:
        self._values = values
        self._json_content = json_content
        self._in_arguments: dict[str, str] | None = None  # made when a tool call comes
        numbers = {placeholder[1:-1].rsplit("_", 1)[1] for placeholder in values}
        self._markers_bytes = [f"_{number}".encode() for number in numbers]
        #: (choice index, the text field or the tool call's index) -> its restorer.
        self._streams: dict[tuple[int, str | int], StreamRestorer] = {}
        #: The last chunk seen, the model of the one that gives out what was held.
        self._last: dict[str, Any] | None = None

    def body(self, body: JSONBody) -> None:
        # Every form of a placeholder a model writes back holds "_<its number>": an answer
        # holding none of this request's is passed as it is, not parsed (a search in C).
        raw = body.raw if not body.changed else body.encode()
        if not any(marker in raw for marker in self._markers_bytes):
            return
        try:
            answer = body.json()
        except ValueError:
            return
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list):
            return
        changed = False
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            for field, text in message.items():
                if field != "role" and isinstance(text, str):
                    restored = restore_text(text, self._values_for(field))
                    if restored != text:
                        message[field], changed = restored, True
            for call in message.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    restored = restore_text(function["arguments"], self._argument_values())
                    if restored != function["arguments"]:
                        function["arguments"], changed = restored, True
        if changed:
            body.set_json(answer)

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        if event.done:
            return (*self._flush(), event)
        try:
            chunk = event.json()
        except ValueError:
            return (event,)
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list) or not choices:
            return (event,)
        self._last = chunk
        changed = False
        for choice in choices:
            if isinstance(choice, dict):
                changed = self._choice(choice) or changed
        if changed:  # else the event goes out as its bytes came, not serialized again
            event.set_json(chunk)
        return (event,)

    def close(self) -> Sequence[SSEEvent]:
        return self._flush()

    def _choice(self, choice: dict[str, Any]) -> bool:
        """Restore one choice's delta in place; whether anything in it changed."""
        index = choice.get("index", 0)
        delta = choice.get("delta")
        finished = choice.get("finish_reason") is not None
        if not isinstance(delta, dict):
            return False
        changed = False
        texts = [f for f, v in delta.items() if f != "role" and isinstance(v, str)]
        if texts:  # moved on from another text field (its thinking to its answer): that one is done
            changed = self._close_texts(index, delta, but=texts)
        for field in texts:
            text = delta[field]
            out = self._stream(index, field).feed(text)
            if out != text:
                delta[field], changed = out, True
        for call in delta.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                key = (index, call.get("index", 0))
                out = self._stream(*key).feed(function["arguments"])
                if out != function["arguments"]:
                    function["arguments"], changed = out, True
        if finished:
            changed = self._close_texts(index, delta, but=()) or changed
            changed = self._close_calls(index, delta) or changed
        return changed

    def _close_texts(self, index: int, delta: dict[str, Any], *, but: Sequence[str]) -> bool:
        """Give out what choice ``index``'s text fields other than ``but`` hold, in ``delta``
        (after what it already carries of that field)."""
        held = [key for key in self._streams if key[0] == index and isinstance(key[1], str)]
        added = False
        for key in held:
            field = key[1]
            assert isinstance(field, str)
            if field in but:
                continue
            rest = self._streams.pop(key).close()
            if rest:
                before = delta.get(field)
                delta[field] = before + rest if isinstance(before, str) else rest
                added = True
        return added

    def _close_calls(self, index: int, delta: dict[str, Any]) -> bool:
        held = [key for key in self._streams if key[0] == index and isinstance(key[1], int)]
        added = False
        for key in held:
            rest = self._streams.pop(key).close()
            if rest:
                calls = delta.setdefault("tool_calls", [])
                calls.append({"index": key[1], "function": {"arguments": rest}})
                added = True
        return added

    def _stream(self, index: int, slot: str | int) -> StreamRestorer:
        restorer = self._streams.get((index, slot))
        if restorer is None:
            values = self._values_for(slot) if isinstance(slot, str) else self._argument_values()
            restorer = self._streams[(index, slot)] = StreamRestorer(values)
        return restorer

    def _values_for(self, field: str) -> dict[str, str]:
        """The values as a message's text ``field`` holds them (JSON content: escaped)."""
        if field == "content" and self._json_content:
            return self._argument_values()
        return self._values

    def _argument_values(self) -> dict[str, str]:
        """The values as a tool call's arguments (JSON) hold them."""
        if self._in_arguments is None:
            self._in_arguments = in_json_strings(self._values)
        return self._in_arguments

    def _flush(self) -> Sequence[SSEEvent]:
        """What is still held, as one chunk shaped like the stream's last."""
        if not self._streams:
            return ()
        choices: dict[int, dict[str, Any]] = {}
        for (index, slot), restorer in self._streams.items():
            rest = restorer.close()
            if not rest:
                continue
            delta = choices.setdefault(index, {"index": index, "delta": {}})["delta"]
            if isinstance(slot, str):
                delta[slot] = rest
            else:
                delta.setdefault("tool_calls", []).append(
                    {"index": slot, "function": {"arguments": rest}}
                )
        self._streams.clear()
        if not choices:
            return ()
        last = self._last or {}
        kept: tuple[str, ...] = ("id", "object", "created", "model")
        chunk: dict[str, Any] = {key: last[key] for key in kept if key in last}
        chunk["choices"] = [
            {**choice, "finish_reason": None} for _, choice in sorted(choices.items())
        ]
        return (SSEEvent.of_json(chunk),)
