"""The request pipeline the layers plug into (DESIGN.md section 3a).

- ``context``: ``RequestContext``, the only channel between layers;
- ``body``: the request body, read once and replayed;
- ``verdicts``: ``Verdict`` (each layer's decision), ``Refusal`` (the error it answers with),
  ``unavailable`` (the one storage-failure answer);
- ``admission``: every layer's storage operations for a request, as one atomic step, and the
  settlement after the response;
- ``transforms``: ``ResponseTransform`` and the chain that runs them over the answer;
- ``response``: the one ``send`` wrapper per request, and the writer of upstream answers;
- ``entry``: where a request enters the pipeline and where it is settled;
- ``layer``: ``PolicyLayer``, the scaffold of every policy middleware.
"""

from __future__ import annotations

from gateway_kit.pipeline.admission import (
    Admission,
    Amend,
    Contribution,
    Participant,
    Settlement,
)
from gateway_kit.pipeline.context import RequestContext, get_context
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.pipeline.transforms import JSONBody, ResponseTransform, TransformChain
from gateway_kit.pipeline.verdicts import Refusal, Verdict, unavailable

__all__ = [
    "Admission",
    "Amend",
    "Contribution",
    "JSONBody",
    "Participant",
    "PolicyLayer",
    "Refusal",
    "RequestContext",
    "ResponseTransform",
    "Settlement",
    "TransformChain",
    "Verdict",
    "get_context",
    "unavailable",
]
