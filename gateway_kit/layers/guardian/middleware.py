"""``GuardianMiddleware``: loop protection in front of the model call.

It reads the request once (``chat.request``), works out its facts (``facts``) and the rules in
force for the key (the configuration's, the plan's and the key's own; a key's allow-list
exempts it), then:

1. the stateless rules (``context_size``, ``tool_loop``, ``context_growth``) decide before any
   storage is touched: a block answers at once, and the request holds nothing (no quota, no
   budget, no counter);
2. the stateful ones (``repeat``, ``conversation_steps``, ``spend_spike``) join the request's
   admission step with their counters and reads (``step``): one round trip with the other
   layers', all or nothing.

Trips are recorded once per episode (``events``), after the answer is on its way.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import anyio.to_thread

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send, header
from gateway_kit.accounts.keys import Principal
from gateway_kit.chat.request import RequestKind, load_request
from gateway_kit.config import Mode, OnError
from gateway_kit.config.guardian import GuardianRules
from gateway_kit.exceptions import StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.layers.guardian import rules as checks
from gateway_kit.layers.guardian.events import GuardianRecorder
from gateway_kit.layers.guardian.facts import RequestFacts, facts_of
from gateway_kit.layers.guardian.policy import GuardianPolicy, GuardianVerdict
from gateway_kit.layers.guardian.step import DaySpend, GuardianStep, StepKeys
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal, unavailable

__all__ = ["GuardianMiddleware"]

#: Below this share of its threshold, a prompt's estimate is trusted: no exact count.
_EXACT_FROM = 0.8
_ESTIMATE_SUFFICES = 4
#: Models whose context window is remembered.
_WINDOWS_KEPT = 1024


class GuardianMiddleware(GatewayLayer):
    """Guardian for authenticated chat requests (anything else passes through)."""

    concern = "guardian"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
    ) -> None:
        config = gateway.config.guardian
        super().__init__(app, gateway=gateway, section=config, mode=mode, on_error=on_error)
        self.policy = GuardianPolicy(
            config if mode is None else config.model_copy(update={"mode": self.mode})
        )
        self.recorder = GuardianRecorder(gateway)
        self.day_spend = DaySpend(gateway.clock)
        self._windows: dict[str, int | None] = {}
        self._header = config.conversation_header.lower().encode()
        # With PII masking on, nothing keeps a request's raw text past the request.
        self._keep_messages = gateway.config.pii.mode is not Mode.ENFORCE

    def passes(self, scope: Scope) -> bool:
        return self.request_kind != "chat" or super().passes(scope)

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        principal = ctx.principal
        assert principal is not None
        gateway = self.gateway
        kind: RequestKind = "chat"
        loaded = await load_request(
            scope, receive, max_body_bytes=gateway.config.server.max_body_bytes, kind=kind
        )
        if loaded is None:
            return None  # the client left
        if isinstance(loaded, Refusal):
            await self.refuse(ctx, send, loaded)
            return None
        payload, receive = loaded
        try:
            rules = await self._rules(ctx, principal)
            secret = await self.recorder.secret()
        except StorageError as exc:
            refusal = unavailable(self.concern, self.on_error, exc)
            ctx.verdicts[self.concern] = GuardianVerdict(
                action="unchecked" if refusal is None else "block", refusal=refusal
            )
            if refusal is not None:
                await self.refuse(ctx, send, refusal)
                return None
            return receive
        facts = facts_of(payload, keep_messages=self._keep_messages)
        request_hash = self.recorder.request_hash(secret, facts.canonical)
        trips = [t for t in await self._stateless(rules, payload, facts) if t is not None]
        plan = self.policy.plan(rules)
        conversation, uncounted = (
            self._conversation(scope, secret, facts, payload) if plan.conversation else ("", 0)
        )
        keys = StepKeys.of(principal, request_hash, conversation, gateway.clock(), rules, plan)
        step = GuardianStep(self, principal, rules, plan, keys, trips, request_hash, uncounted)
        verdict = self.policy.verdict(rules, trips)
        step.record(ctx, verdict)
        if verdict.refusal is not None:
            # Decided without storage: the request holds nothing at all.
            await self.refuse(ctx, send, verdict.refusal)
            await step.publish(verdict)
            return None
        ctx.admission.join(step)
        return receive

    async def _rules(self, ctx: RequestContext, principal: Principal) -> GuardianRules:
        """The rules in force for the key, without the ones its allow-list exempts it from."""
        gateway = self.gateway
        workspace = ctx.workspace or await gateway.workspaces.cached(principal.workspace_id)
        settings = await gateway.guardian_settings.get(principal.workspace_id)
        plan = gateway.workspaces.plan(workspace) if workspace is not None else None
        plan_name = workspace.plan if workspace is not None else ""
        key_id = principal.key_id
        if key_id not in settings.key_rules and key_id not in settings.allow:
            return self.policy.rules_for(plan_name, plan)
        key_rules = dict(settings.key_rules.get(key_id) or {})
        for rule in settings.allow.get(key_id, ()):
            for name in GuardianRules.model_fields if rule == "*" else (rule,):
                key_rules[name] = {**key_rules.get(name, {}), "action": "off"}
        return self.policy.rules_for(plan_name, plan, key_rules)

    async def _stateless(
        self, rules: GuardianRules, payload: dict[str, object], facts: RequestFacts
    ) -> list[checks.Trip | None]:
        found = [checks.tool_loop(rules.tool_loop, facts)]
        found.append(checks.context_growth(rules.context_growth, facts))
        size = rules.context_size
        if size.acting != "off":
            model = payload.get("model")
            name = model if isinstance(model, str) else ""
            window = self._window(name)
            threshold = math.floor(window * size.window_share) if window else size.max_tokens
            tokens, exact = facts.tokens, False
            if _EXACT_FROM * threshold <= tokens < _ESTIMATE_SUFFICES * threshold:
                # A prompt near or past the limit: counted exactly, off the event loop (a
                # large prompt takes milliseconds; the tokenizer's first use loads its data).
                # Far past it, the estimate decides: no real text has four times fewer tokens
                # than it says, and counting megabytes of one repeated character took seconds
                # of CPU per request (refused requests cost no quota: free to repeat).
                counted = await anyio.to_thread.run_sync(
                    self.gateway.tokens.count_prompt, payload, name
                )
                tokens, exact = counted.tokens, counted.exact
            found.append(checks.context_size(size, tokens, exact, window))
        return found

    def _window(self, model: str) -> int | None:
        """The model's context window: configured, else the price table's (remembered by
        name: the configuration does not change while the gateway runs)."""
        windows = self._windows
        if model in windows:
            return windows[model]
        route = self.gateway.route(model)
        config = route.config if route is not None else None
        if config is not None and config.context_window:
            window: int | None = config.context_window
        else:
            window = self.gateway.costs.context_window(model)
        if len(windows) >= _WINDOWS_KEPT:  # names a client made up, say
            windows.clear()
        windows[model] = window
        return window

    def _conversation(
        self, scope: Scope, secret: bytes, facts: RequestFacts, payload: dict[str, Any]
    ) -> tuple[str, int]:
        """The conversation's identity (32 hex digits, ``""`` for none) and how many of its
        requests were not counted: the client's header, every request counted; else its
        first messages and the end user (``user``) if the request names one, counted from
        the request after its opening (which has no answer to tell it from others yet)."""
        named = header(scope, self._header)
        if named:
            return self.recorder.request_hash(secret, b"conversation:" + named[:256])[7:39], 0
        derived = facts.conversation
        if not derived:
            return "", 0
        end_user = payload.get("user")
        if isinstance(end_user, str) and end_user:
            derived = hashlib.blake2b(derived + end_user.encode(), digest_size=16).digest()
        return derived.hex(), 1
