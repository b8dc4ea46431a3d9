"""``PIIMiddleware``: masks the request before it leaves for the model, restores the answer.

It reads the request once (``chat.request``), masks what ``PIIPolicy`` covers into a ``Vault``
that lives on the request's context only, and:

- ``enforce`` with ``scope = "full"``: sends the masked request on (``replace_json``) and
  registers ``RestoreTransform``, which gives the answer its values back;
- ``enforce`` with ``scope = "cache"``: sends the request as it is; the masked one is left on
  the context (``ctx.extras["pii.masked"]``, with ``ctx.extras["pii.values"]``, placeholder to
  value) for what keys, keeps or logs on it (the cache keys on it and keeps answers masked),
  and ``RestoreTransform`` gives a cached answer its values back;
- ``monitor``: sends the request as it is, and says what it found.

Either way ``x-gateway-pii`` says what was found, by kind (``masked EMAIL=2 PHONE=1``), and
the verdict records the counts, never the values. A detector that raises answers 503
(``on_error = "closed"``, the default: raw PII is never forwarded unchecked) or lets the
request through unmasked (``open``).
"""

from __future__ import annotations

import logging

from gateway_kit._asgi.types import ASGIApp, Receive, Scope, Send
from gateway_kit.accounts.pii import PIISettings
from gateway_kit.accounts.secrets import DeploymentSecret
from gateway_kit.chat.request import RequestKind, load_request
from gateway_kit.config import Mode, OnError
from gateway_kit.gateway import Gateway
from gateway_kit.layers._base import GatewayLayer
from gateway_kit.layers.pii.masking import Numbering, Vault, keyed_numbering
from gateway_kit.layers.pii.policy import PIIPolicy, PIIVerdict
from gateway_kit.layers.pii.transform import RestoreTransform
from gateway_kit.pipeline.body import replace_json
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.providers.base import asks_for_json

__all__ = ["PIIMiddleware"]

logger = logging.getLogger("gateway_kit.pii")

_SECRET_KEY = "gk:pii:secret"
#: Workspaces whose own policy is kept.
_WORKSPACES_KEPT = 10_000


class PIIMiddleware(GatewayLayer):
    """PII masking for inference requests (chat and embeddings), with or without Auth."""

    concern = "pii"

    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway: Gateway,
        mode: Mode | str | None = None,
        on_error: OnError | str | None = None,
        policy: PIIPolicy | None = None,
    ) -> None:
        config = gateway.config.pii
        super().__init__(app, gateway=gateway, section=config, mode=mode, on_error=on_error)
        self.config = config
        # Built when the layer is on only: the PHONE detector needs the pii extra.
        self._policy = policy
        if policy is None and self.mode is not Mode.OFF:
            self._policy = PIIPolicy(config)
        self._secret = DeploymentSecret(lambda: gateway.storage, _SECRET_KEY, config.secret)
        self._keyed: Numbering | None = None
        #: Workspaces with settings of their own: the settings seen, and their policy.
        self._workspaces: dict[str, tuple[PIISettings, PIIPolicy]] = {}

    def passes(self, scope: Scope) -> bool:
        # Unlike the layers that count per key, masking needs no principal: a gateway run
        # without Auth (or an app that mounts this layer alone) masks all the same. A gateway
        # not entered is the endpoint's to answer (503).
        return self.mode is Mode.OFF or not self.gateway.running

    @property
    def policy(self) -> PIIPolicy:
        if self._policy is None:
            self._policy = PIIPolicy(self.config)
        return self._policy

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        kind: RequestKind = "embedding" if self.request_kind == "embedding" else "chat"
        loaded = await load_request(
            scope, receive, max_body_bytes=self.gateway.config.server.max_body_bytes, kind=kind
        )
        if loaded is None:
            return None  # the client left
        if isinstance(loaded, Refusal):
            await self.refuse(ctx, send, loaded)
            return None
        payload, receive = loaded
        try:
            vault = Vault(await self._numbering() if self.config.placeholders == "keyed" else None)
            policy = await self._policy_for(ctx)
            masked = (
                policy.mask(payload, vault) if kind == "chat" else policy.mask_input(payload, vault)
            )
        except Exception as exc:  # a detector failed (whatever it raised), or the storage
            logger.error("PII masking failed (on_error=%s): %r", self.on_error.value, exc)
            if self.on_error is OnError.OPEN:
                ctx.verdicts[self.concern] = PIIVerdict(action="unchecked")
                ctx.headers.append((b"x-gateway-pii", b"unchecked"))
                return receive
            refusal = Refusal(
                503,
                "The PII check cannot be made right now; try again shortly.",
                code="pii_unavailable",
                type="api_error",
            )
            ctx.verdicts[self.concern] = PIIVerdict(action="block", refusal=refusal)
            await self.refuse(ctx, send, refusal)
            return None
        rewrite = self.mode is Mode.ENFORCE and self.config.scope == "full"
        verdict = policy.verdict(vault, rewrote=rewrite)
        ctx.verdicts[self.concern] = verdict
        if verdict.counts:
            ctx.headers.append((b"x-gateway-pii", verdict.header()))
        if not vault.values:
            return receive
        if rewrite:
            replace_json(scope, masked)
        elif self.mode is Mode.ENFORCE:
            # The model reads the real values; what keys or keeps text (the cache) takes the
            # masked request, and masks what it keeps with the values.
            ctx.extras["pii.masked"] = masked
            ctx.extras["pii.values"] = vault.values
        if kind == "chat" and self.mode is Mode.ENFORCE:
            # In `cache` scope the model's answer holds no placeholder, but one served from
            # the cache does.
            ctx.transforms.append(
                RestoreTransform(vault.values, json_content=asks_for_json(payload))
            )
        return receive

    async def _numbering(self) -> Numbering:
        """Keyed placeholders' numbering (under the deployment's secret, read once)."""
        if self._keyed is None:
            self._keyed = keyed_numbering(await self._secret.get())
        return self._keyed

    async def _policy_for(self, ctx: RequestContext) -> PIIPolicy:
        """The configuration's policy, with the workspace's own patterns and allow-list when
        it has some (a policy per workspace and version of its settings, kept)."""
        principal = ctx.principal
        if principal is None:
            return self.policy
        settings = await self.gateway.pii_settings.get(principal.workspace_id)
        if not settings:
            return self.policy
        known = self._workspaces.get(principal.workspace_id)
        if known is not None and known[0] == settings:  # equal: a cache may hand out copies
            return known[1]
        config = self.config.model_copy(
            update={
                "patterns": {**self.config.patterns, **settings.patterns},
                "allow": [*self.config.allow, *settings.allow],
            }
        )
        policy = PIIPolicy(config)
        if len(self._workspaces) >= _WORKSPACES_KEPT:
            self._workspaces.clear()
        self._workspaces[principal.workspace_id] = (settings, policy)
        return policy
