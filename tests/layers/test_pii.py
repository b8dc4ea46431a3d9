"""PII masking through the whole stack: the upstream never receives a raw value, the client
gets its values back (JSON, streams, tool calls), monitor mode, failures and configuration."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from gateway_kit import GatewayConfig
from gateway_kit.accounts.pii import PIISettings
from gateway_kit.layers.pii import PIIPolicy
from gateway_kit.layers.pii.detectors import Span
from gateway_kit.layers.pii.masking import PLACEHOLDER
from tests.fakes import COMPLETION, DONE, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

PROMPT = (
    "Hi, I am Anna (anna.lindqvist@example.se, +44 20 7946 0958). Please charge "
    "4111 1111 1111 1111 and write to anna.lindqvist@example.se again."
)
RAW = ("anna.lindqvist@example.se", "+44 20 7946 0958", "4111 1111 1111 1111")


def answer(content: str, **message: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content, **message}}
    return {**COMPLETION, "choices": [{**choice, "finish_reason": "stop"}]}


async def ask(env: Any, *messages: dict[str, Any], **fields: Any) -> Any:
    payload = {"model": "gpt-fake", "messages": list(messages), **fields}
    return await env.recorder.request(
        "POST", "/v1/chat/completions", json=payload, headers=env.auth()
    )


def streamed_text(response: Any) -> str:
    """The content a streamed answer's events carry, joined."""
    return "".join(
        json.loads(e)["choices"][0]["delta"].get("content") or ""
        for e in response.events()
        if e != "[DONE]"
    )


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_the_upstream_gets_placeholders_and_the_client_its_values_back() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        env.upstream.json_body = answer("I will write to <EMAIL_1> and call <PHONE_1>.")
        response = await ask(env, {"role": "system", "content": "Be brief."}, user(PROMPT))
        assert response.status == 200
        sent = env.upstream.requests[-1].content.decode()
        assert not any(value in sent for value in RAW)
        assert env.upstream.sent_json()["messages"][1]["content"] == (
            "Hi, I am Anna (<EMAIL_1>, <PHONE_1>). Please charge <CARD_1> and write to "
            "<EMAIL_1> again."
        )
        assert response.json()["choices"][0]["message"]["content"] == (
            "I will write to anna.lindqvist@example.se and call +44 20 7946 0958."
        )
        assert response.headers["x-gateway-pii"] == "masked CARD=1 EMAIL=2 PHONE=1"


async def test_a_stream_gets_its_values_back_whatever_the_chunks() -> None:
    text = "Sure <EMAIL_1>, your card <CARD_1> is noted."
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        for cut in (1, 6, 9, 12, 14, 25):
            env.upstream.stream = ScriptedStream(
                [chunk(text[:cut]), chunk(text[cut:]), chunk(finish="stop"), DONE]
            )
            response = await ask(env, user(PROMPT), stream=True)
            assert response.status == 200
            assert streamed_text(response) == (
                "Sure anna.lindqvist@example.se, your card 4111 1111 1111 1111 is noted."
            ), cut
            assert response.events()[-1] == "[DONE]"


async def test_network_chunks_cut_anywhere_even_inside_a_character_change_nothing() -> None:
    """The upstream's SSE bytes cut at every byte offset: the client reads exactly the answer
    with its values back, and the upstream never read a raw value."""
    text = "Envoyé à <EMAIL_1> ✓ — 📞 <PHONE_1>."
    events = b"".join([chunk(text[:12]), chunk(text[12:]), chunk(finish="stop"), DONE])
    expected = "Envoyé à anna.lindqvist@example.se ✓ — 📞 +44 20 7946 0958."
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        for cut in range(1, len(events)):
            env.upstream.stream = ScriptedStream([events[:cut], events[cut:]])
            response = await ask(env, user(PROMPT), stream=True)
            assert response.status == 200
            assert streamed_text(response) == expected, cut
        sent = b"".join(request.content for request in env.upstream.requests)
        assert not any(value.encode() in sent for value in RAW)


async def test_a_reasoning_models_thinking_gets_its_values_back_too() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        env.upstream.json_body = answer("Done.", reasoning_content="Mail <EMAIL_1> first.")
        response = await ask(env, user(PROMPT))
        message = response.json()["choices"][0]["message"]
        assert message["reasoning_content"] == "Mail anna.lindqvist@example.se first."
        env.upstream.stream = ScriptedStream(
            [
                chunk(reasoning="Call <PHO"),
                chunk(reasoning="NE_1>."),
                chunk("Done."),
                chunk(finish="stop"),
                DONE,
            ]
        )
        response = await ask(env, user(PROMPT), stream=True)
        deltas = [json.loads(e)["choices"][0]["delta"] for e in response.events()[:-1]]
        assert "".join(d.get("reasoning", "") for d in deltas) == "Call +44 20 7946 0958."


async def test_a_stream_without_finish_reason_gives_out_what_it_held_before_done() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        env.upstream.stream = ScriptedStream([chunk("Mail <EMA"), chunk("IL_1"), DONE])
        response = await ask(env, user(PROMPT), stream=True)
        texts = [json.loads(e)["choices"][0]["delta"]["content"] for e in response.events()[:-1]]
        assert "".join(texts) == "Mail anna.lindqvist@example.se"


async def test_tool_call_arguments_are_masked_as_json_and_restored() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "send", "arguments": json.dumps({"to": "anna.lindqvist@example.se"})},
    }
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        reply = {**call, "function": {"name": "send", "arguments": '{"to": "<EMAIL_1>"}'}}
        env.upstream.json_body = answer("", tool_calls=[reply])
        history = [
            user(PROMPT),
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "sent to anna.lindqvist@example.se",
            },
        ]
        response = await ask(env, *history)
        sent = env.upstream.sent_json()["messages"]
        assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"to": "<EMAIL_1>"}
        assert sent[2]["content"] == "sent to <EMAIL_1>"
        restored = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert json.loads(restored["arguments"]) == {"to": "anna.lindqvist@example.se"}


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeK\n"
    "-----END RSA PRIVATE KEY-----"
)


async def test_a_value_with_newlines_goes_back_into_tool_call_arguments_as_valid_json() -> None:
    """Arguments are JSON: a value put back there is escaped as a JSON string's content (a raw
    newline would make them invalid), whole and streamed, wherever the chunks are cut; text
    fields get the raw value."""
    prompt = f"Store this for Zoë:\n{PEM}\nthanks"
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        arguments = '{"key": "<API_KEY_1>", "note": "für Zoë"}'
        reply = {
            "id": "c1",
            "type": "function",
            "function": {"name": "put", "arguments": arguments},
        }
        env.upstream.json_body = answer("Stored <API_KEY_1>", tool_calls=[reply])
        response = await ask(env, user(prompt))
        assert PEM not in env.upstream.requests[-1].content.decode()
        message = response.json()["choices"][0]["message"]
        restored = message["tool_calls"][0]["function"]["arguments"]
        assert json.loads(restored) == {"key": PEM, "note": "für Zoë"}
        assert message["content"] == f"Stored {PEM}"
        for cut in range(1, len(arguments)):
            calls = [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "put"}},
                {"index": 0, "function": {"arguments": arguments[:cut]}},
                {"index": 0, "function": {"arguments": arguments[cut:]}},
            ]
            env.upstream.stream = ScriptedStream(
                [*(chunk(tool_calls=[c]) for c in calls), chunk(finish="tool_calls"), DONE]
            )
            response = await ask(env, user(prompt), stream=True)
            deltas = [json.loads(e)["choices"][0]["delta"] for e in response.events()[:-1]]
            streamed = "".join(
                call["function"].get("arguments", "")
                for delta in deltas
                for call in delta.get("tool_calls", ())
            )
            assert json.loads(streamed) == {"key": PEM, "note": "für Zoë"}, cut


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
async def test_structured_output_gets_its_values_back_as_valid_json(kind: str) -> None:
    """Content asked for as JSON is JSON: a value with newlines went back raw into its string
    (the SDK's parse failed, JSON and streamed)."""
    prompt = f"Store this for Zoë:\n{PEM}\nthanks"
    content = '{"key": "<API_KEY_1>", "note": "für Zoë"}'
    schema = {"name": "stored", "schema": {"type": "object"}}
    response_format = {"type": kind, **({"json_schema": schema} if kind == "json_schema" else {})}
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        env.upstream.json_body = answer(content)
        response = await ask(env, user(prompt), response_format=response_format)
        assert PEM not in env.upstream.requests[-1].content.decode()
        parsed = json.loads(response.json()["choices"][0]["message"]["content"])
        assert parsed == {"key": PEM, "note": "für Zoë"}
        for cut in (5, 12, 20, len(content) - 3):
            env.upstream.stream = ScriptedStream(
                [chunk(content[:cut]), chunk(content[cut:]), chunk(finish="stop"), DONE]
            )
            streamed = await ask(env, user(prompt), response_format=response_format, stream=True)
            assert json.loads(streamed_text(streamed)) == {"key": PEM, "note": "für Zoë"}, cut
        # Without response_format the content is text: the value goes back as it is.
        env.upstream.stream = None
        env.upstream.json_body = answer("Stored <API_KEY_1>")
        text = (await ask(env, user(prompt))).json()["choices"][0]["message"]["content"]
        assert text == f"Stored {PEM}"


async def test_a_stop_sequence_holding_a_value_is_masked_with_the_prompt() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        await ask(
            env,
            user("Write to anna@example.se, then stop."),
            stop=["anna@example.se", "END"],
        )
        sent = env.upstream.sent_json()
        # The model reads the placeholder: a stop on the raw value never fired (and leaked it).
        assert sent["stop"] == ["<EMAIL_1>", "END"]
        assert "anna@example.se" not in env.upstream.requests[-1].content.decode()


async def test_keyed_placeholders_are_the_same_in_every_request_whatever_came_before() -> None:
    async with provisioned("scale", pii={"mode": "enforce"}) as env:
        await ask(env, user("Mail anna.lindqvist@example.se"))
        first = env.upstream.sent_json()["messages"][0]["content"]
        # Another conversation, another value first: Anna's placeholder is the same.
        await ask(env, user("From bo@example.se to anna.lindqvist@example.se"))
        second = env.upstream.sent_json()["messages"][0]["content"]
        anna = first.removeprefix("Mail ")
        assert PLACEHOLDER.fullmatch(anna)
        assert second.endswith(f" to {anna}")
        assert second.split()[1] != anna
        # The answer gets its values back as with any placeholder.
        env.upstream.json_body = answer(f"Wrote to {anna}.")
        response = await ask(env, user("Mail anna.lindqvist@example.se"))
        reply = response.json()["choices"][0]["message"]["content"]
        assert reply == "Wrote to anna.lindqvist@example.se."
    # The number is an HMAC under the deployment's secret: another secret, another number.
    async with provisioned("scale", pii={"mode": "enforce", "secret": "s" * 32}) as env:
        await ask(env, user("Mail anna.lindqvist@example.se"))
        assert env.upstream.sent_json()["messages"][0]["content"] != first


async def test_monitor_counts_and_sends_the_request_as_it_is() -> None:
    async with provisioned("scale", pii={"mode": "monitor"}) as env:
        response = await ask(env, user(PROMPT))
        assert response.status == 200
        assert "anna.lindqvist@example.se" in env.upstream.requests[-1].content.decode()
        assert response.headers["x-gateway-pii"] == "found CARD=1 EMAIL=2 PHONE=1"


async def test_a_name_is_masked_with_a_bare_placeholder_openai_accepts() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        await ask(env, {"role": "user", "name": "anna.lindqvist@example.se", "content": "Hi"})
        assert env.upstream.sent_json()["messages"][0]["name"] == "EMAIL_1"


async def test_system_prompts_can_be_left_unmasked() -> None:
    async with provisioned(
        "scale", pii={"mode": "enforce", "placeholders": "ordered", "mask_system": False}
    ) as env:
        system = {"role": "system", "content": "Escalate to help@northwind.example."}
        await ask(env, system, user("Mail me at anna.lindqvist@example.se"))
        sent = env.upstream.sent_json()["messages"]
        assert sent[0]["content"] == system["content"]
        assert sent[1]["content"] == "Mail me at <EMAIL_1>"


class Broken:
    def detect(self, text: str) -> list[Span]:
        raise RuntimeError("the NER model is not loaded")


async def test_a_failing_detector_answers_503_when_closed_and_sends_nothing() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        for layer in _pii_layers(env):
            layer._policy = PIIPolicy(env.gateway.config.pii, detectors=[Broken()])
        response = await ask(env, user(PROMPT))
        assert response.status == 503
        assert response.json()["error"]["code"] == "pii_unavailable"
        assert env.upstream.calls == 0
        assert await env.used_requests() == 0


async def test_a_failing_detector_lets_the_request_through_unmasked_when_open() -> None:
    async with provisioned(
        "scale", pii={"mode": "enforce", "placeholders": "ordered", "on_error": "open"}
    ) as env:
        for layer in _pii_layers(env):
            layer._policy = PIIPolicy(env.gateway.config.pii, detectors=[Broken()])
        response = await ask(env, user(PROMPT))
        assert response.status == 200
        assert response.headers["x-gateway-pii"] == "unchecked"


def _pii_layers(env: Any) -> list[Any]:
    """The PIIMiddleware instances of the app's routes."""
    from gateway_kit.layers.pii import PIIMiddleware

    found, seen = [], set()
    stack = [env.recorder.app]
    while stack:
        app = stack.pop()
        if id(app) in seen or app is None:
            continue
        seen.add(id(app))
        if isinstance(app, PIIMiddleware):
            found.append(app)
        for attribute in ("app", "router", "routes", "endpoint"):
            value = getattr(app, attribute, None)
            stack.extend(value if isinstance(value, list) else [value])
    assert found
    return found


async def test_a_workspace_adds_its_own_patterns_and_allow_list() -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/pii"
        change = {"patterns": {"ACME_ID": r"ACME-\d+"}, "allow": ["help@northwind.example"]}
        response = await env.recorder.request("PATCH", path, json=change, headers=env.auth())
        assert response.status == 200
        assert response.json()["patterns"] == {"ACME_ID": r"ACME-\d+"}
        await ask(env, user("Ticket ACME-4471: mail help@northwind.example or a@x.example"))
        assert env.upstream.sent_json()["messages"][0]["content"] == (
            "Ticket <ACME_ID_1>: mail help@northwind.example or <EMAIL_1>"
        )
        # Removed again: the ticket number goes to the model as it is.
        change = {"patterns": {"ACME_ID": None}}
        await env.recorder.request("PATCH", path, json=change, headers=env.auth())
        await ask(env, user("Ticket ACME-4471"))
        assert env.upstream.sent_json()["messages"][0]["content"] == "Ticket ACME-4471"


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"patterns": {"ACME_ID": "(?<=ACME-)\\d+"}}, "patterns.ACME_ID"),  # not RE2's syntax
        ({"patterns": {"ACME_ID": "ACME-(\\d+"}}, "patterns.ACME_ID"),
        ({"patterns": {"acme": "x"}}, "patterns.acme"),
        ({"patterns": {"EMAIL": "x"}}, "patterns.EMAIL"),
        ({"patterns": ["ACME"]}, "patterns"),
        ({"allow": "S3"}, "allow"),
        ({"allow": [""]}, "allow"),
        ({"deny": ["S3"]}, "deny"),
    ],
)
async def test_bad_workspace_settings_are_refused_and_change_nothing(
    change: dict[str, Any], param: str
) -> None:
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/pii"
        response = await env.recorder.request("PATCH", path, json=change, headers=env.auth())
        assert response.status == 400
        assert response.json()["error"]["param"] == param
        assert await env.gateway.pii_settings.get(env.workspace_id) == PIISettings()


@pytest.mark.parametrize("pattern", ["(?=ACME)ACME-\\d+", "(?<!x)ACME", "(A)CME-\\1"])
async def test_without_re2_a_pattern_re2_refuses_is_refused_too(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway without the pii extra (masking off) stored a lookaround with a 200: the one
    that runs the pattern, under RE2, could not."""
    import gateway_kit.config.pii as config

    monkeypatch.setattr(config, "_RE2", False)  # as without google-re2
    async with provisioned("scale") as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/pii"
        change = {"patterns": {"ACME_ID": pattern}}
        response = await env.recorder.request("PATCH", path, json=change, headers=env.auth())
        assert response.status == 400
        assert response.json()["error"]["param"] == "patterns.ACME_ID"
        assert "RE2 has no" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kinds": ["EMAIL", "PASSPORT"]}, "unknown kind 'PASSPORT'"),
        ({"patterns": {"ACME_ID": "ACME-(\\d+"}}, "pattern ACME_ID: not a regular expression"),
        ({"patterns": {"acme": "x"}}, "pattern name 'acme'"),
        ({"patterns": {"ANY": "x*"}}, "pattern ANY: matches the empty string"),
    ],
)
def test_configuration_mistakes_are_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GatewayConfig.model_validate({"pii": {"mode": "enforce", **fields}})


@pytest.mark.parametrize(
    "pattern", ["(a|a)*b", "(a|aa)*b", "(a?){25}a{25}", "a*a*a*a*a*b", "(a+)+b"]
)
async def test_a_workspace_pattern_can_never_stall_the_gateway(pattern: str) -> None:
    """Patterns whose backtracking is exponential (or a high power) in Python's ``re``: one of
    them once took 18 s over 27 characters, and the whole gateway with it. They run under RE2,
    in time linear in the text: a prompt built to stall them is answered."""
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        path = f"/api/v1/workspaces/{env.workspace_id}/pii"
        change = {"patterns": {"ACME_ID": pattern}}
        patched = await env.recorder.request("PATCH", path, json=change, headers=env.auth())
        assert patched.status == 200
        with anyio.fail_after(30):  # under re, longer than the universe's age
            response = await ask(env, user("a" * 5000 + "!"))
        assert response.status == 200


async def test_guardian_keeps_no_raw_text_past_the_request_when_masking_is_on() -> None:
    """Guardian remembers a long conversation's last messages to spare re-reading them; with
    masking on it keeps only digests: the raw values live in the request's context only."""
    from gateway_kit.layers.guardian import facts

    email = "rare.person.4711@example.se"
    history = [user(f"Step {i}: write to {email}") for i in range(20)]
    guardian = {"mode": "enforce"}
    for mode, kept in (("off", True), ("enforce", False)):
        facts._PREFIXES._entries.clear()
        async with provisioned("scale", pii={"mode": mode}, guardian=guardian) as env:
            response = await ask(env, *history, {"role": "assistant", "content": "ok"}, user("go"))
            assert response.status == 200
        held = json.dumps([entry[0] for entry in facts._PREFIXES._entries.values()])
        assert (email in held) is kept


EMAIL = "anna.lindqvist@example.se"


async def test_assistant_turns_and_the_requests_own_fields_reach_the_upstream_masked() -> None:
    """Every text of a request the model reads is masked: an assistant's refusal (field and
    content part), its thinking, a legacy function call's arguments, the request's ``user``,
    ``metadata`` and ``prediction``, and with tool descriptions the parameters' schema
    texts."""
    history = [
        {"role": "assistant", "content": [{"type": "refusal", "refusal": f"Not {EMAIL}"}]},
        {
            "role": "assistant",
            "content": "ok",
            "refusal": f"Not {EMAIL}",
            "reasoning_content": f"Think of {EMAIL}",
            "reasoning": f"Think of {EMAIL}",
        },
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "send", "arguments": json.dumps({"to": EMAIL})},
        },
        user("Go on"),
    ]
    to = {
        "type": "string",
        "description": f"e.g. {EMAIL}",
        "default": EMAIL,
        "examples": [EMAIL],
        "enum": [EMAIL, "nobody"],
    }
    parameters = {"type": "object", "properties": {"to": to}}
    tools = [{"type": "function", "function": {"name": "send", "parameters": parameters}}]
    pii = {"mode": "enforce", "placeholders": "ordered", "mask_tool_descriptions": True}
    async with provisioned("scale", pii=pii) as env:
        env.upstream.json_body = answer("Sent to <EMAIL_1>.")
        response = await ask(
            env,
            *history,
            user=EMAIL,
            safety_identifier=EMAIL,
            prompt_cache_key=f"inbox {EMAIL}",
            metadata={"customer": EMAIL, "tier": "gold"},
            prediction={"type": "content", "content": [{"type": "text", "text": EMAIL}]},
            tools=tools,
        )
        assert response.json()["choices"][0]["message"]["content"] == f"Sent to {EMAIL}."
        assert EMAIL not in env.upstream.requests[-1].content.decode()
        sent = env.upstream.sent_json()
        messages = sent["messages"]
        assert messages[0]["content"] == [{"type": "refusal", "refusal": "Not <EMAIL_1>"}]
        assert (messages[1]["refusal"], messages[1]["reasoning_content"]) == (
            "Not <EMAIL_1>",
            "Think of <EMAIL_1>",
        )
        assert json.loads(messages[2]["function_call"]["arguments"]) == {"to": "<EMAIL_1>"}
        assert (sent["user"], sent["metadata"]) == (
            "<EMAIL_1>",
            {"customer": "<EMAIL_1>", "tier": "gold"},
        )
        # OpenAI's successor of `user`, and the prompt cache's key: they name the end user too.
        assert (sent["safety_identifier"], sent["prompt_cache_key"]) == (
            "<EMAIL_1>",
            "inbox <EMAIL_1>",
        )
        assert sent["prediction"]["content"] == [{"type": "text", "text": "<EMAIL_1>"}]
        assert sent["tools"][0]["function"]["parameters"]["properties"]["to"] == {
            "type": "string",
            "description": "e.g. <EMAIL_1>",
            "default": "<EMAIL_1>",
            "examples": ["<EMAIL_1>"],
            "enum": ["<EMAIL_1>", "nobody"],
        }
        # A prediction given as a string, too.
        await ask(env, user("Hi"), prediction={"type": "content", "content": f"To {EMAIL}"})
        assert env.upstream.sent_json()["prediction"]["content"] == "To <EMAIL_1>"


async def test_tool_call_arguments_with_json_escaped_brackets_get_their_values_back() -> None:
    """An upstream writing JSON with Go's defaults escapes ``<`` and ``>`` in a tool call's
    arguments (``\\u003cEMAIL_1\\u003e``): the client's tool still gets the value, whole and
    streamed, wherever the chunks are cut."""
    arguments = '{"to": "\\u003cEMAIL_1\\u003e", "cc": "\\u003cemail_1\\u003E"}'
    expected = {"to": EMAIL, "cc": EMAIL}
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        reply = {
            "id": "c1",
            "type": "function",
            "function": {"name": "send", "arguments": arguments},
        }
        env.upstream.json_body = answer("", tool_calls=[reply])
        response = await ask(env, user(f"Mail {EMAIL}"))
        restored = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert json.loads(restored["arguments"]) == expected
        for cut in range(1, len(arguments)):
            calls = [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "send"}},
                {"index": 0, "function": {"arguments": arguments[:cut]}},
                {"index": 0, "function": {"arguments": arguments[cut:]}},
            ]
            env.upstream.stream = ScriptedStream(
                [*(chunk(tool_calls=[c]) for c in calls), chunk(finish="tool_calls"), DONE]
            )
            response = await ask(env, user(f"Mail {EMAIL}"), stream=True)
            deltas = [json.loads(e)["choices"][0]["delta"] for e in response.events()[:-1]]
            streamed = "".join(
                call["function"].get("arguments", "")
                for delta in deltas
                for call in delta.get("tool_calls", ())
            )
            assert json.loads(streamed) == expected, cut


@pytest.mark.parametrize("own", ["email_1", "{EMAIL_1}", "<email_1>", "[EMAIL_1]", "<EMAIL_1>"])
async def test_a_name_the_client_wrote_in_any_form_restore_reads_comes_back_as_written(
    own: str,
) -> None:
    """With ordered placeholders the first address would be ``<EMAIL_1>``; the client's own
    ``email_1`` (a variable, a template's slot), which restoring would read as that
    placeholder, is reserved: the model's echo of it comes back unchanged."""
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        env.upstream.json_body = answer(f"Renamed `{own}`; mail <EMAIL_2>.")
        response = await ask(env, user(f"Rename `{own} = load()`. I am {EMAIL}."))
        assert env.upstream.sent_json()["messages"][0]["content"] == (
            f"Rename `{own} = load()`. I am <EMAIL_2>."
        )
        assert response.json()["choices"][0]["message"]["content"] == (
            f"Renamed `{own}`; mail {EMAIL}."
        )
        # Anywhere in the request: a tool call's arguments, a name.
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        call["function"]["arguments"] = json.dumps({"var": own})
        env.upstream.json_body = answer(f"{own} and <EMAIL_2>")
        response = await ask(
            env, {"role": "assistant", "content": None, "tool_calls": [call]}, user(EMAIL)
        )
        assert env.upstream.sent_json()["messages"][1]["content"] == "<EMAIL_2>"
        assert response.json()["choices"][0]["message"]["content"] == f"{own} and {EMAIL}"


async def test_numbers_near_numbers_are_masked_and_code_and_versions_are_left_alone() -> None:
    """What the model reads: a phone number next to another number masked (the run is cut
    down to it), an AWS secret access key masked after its name; versions, matrix
    products, paths in code and large amounts left as they are."""
    leaks = (
        "Row 3 415-555-2671\n"
        "Reach me at +1 415 555 2671 24/7\n"
        "Call me on +44 (0)20 7946 0958 or +49 30/1234567\n"
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    code = (
        'Version: 4.0.0.0, <Version>1.2.3.4</Version>, "version": "2.0.1.3", '
        "requests==2.31.0.1; y = x@self.weight.T; use abc::def; Add::add(a, b); "
        "8 045 311 447 people"
    )
    async with provisioned("scale", pii={"mode": "enforce", "placeholders": "ordered"}) as env:
        await ask(env, user(leaks), user(code))
        sent = env.upstream.sent_json()["messages"]
        assert sent[0]["content"] == (
            "Row 3 <PHONE_1>\nReach me at <PHONE_2> 24/7\nCall me on <PHONE_3> or <PHONE_4>\n"
            "AWS_SECRET_ACCESS_KEY=<API_KEY_1>"
        )
        assert sent[1]["content"] == code


def test_an_embeddings_requests_user_is_masked_with_its_input() -> None:
    from gateway_kit.config.pii import PIIConfig
    from gateway_kit.layers.pii import Vault

    policy = PIIPolicy(PIIConfig(mode="enforce", placeholders="ordered"))
    payload = {"model": "embed", "input": [f"About {EMAIL}", [1, 2]], "user": EMAIL}
    masked = policy.mask_input(payload, Vault())
    assert masked == {"model": "embed", "input": ["About <EMAIL_1>", [1, 2]], "user": "<EMAIL_1>"}
    assert payload["user"] == EMAIL  # a copy: the request's own is left as it was
