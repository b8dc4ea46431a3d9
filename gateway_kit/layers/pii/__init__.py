"""PII masking: values found in a request (``detectors``) replaced by placeholders
(``masking``) before it leaves for the model, and restored in the answer (``restore``).

``PIIMiddleware`` puts them on the request path (``policy`` says what a request's masking
covers; ``transform`` restores the answer, JSON and streamed).
"""

from gateway_kit.layers.pii.detectors import (
    BUILTIN_KINDS,
    BuiltinDetector,
    Detector,
    PatternDetector,
    Span,
)
from gateway_kit.layers.pii.masking import Vault, mask_text
from gateway_kit.layers.pii.middleware import PIIMiddleware
from gateway_kit.layers.pii.policy import PIIPolicy, PIIVerdict
from gateway_kit.layers.pii.restore import StreamRestorer, restore_text

__all__ = [
    "BUILTIN_KINDS",
    "BuiltinDetector",
    "Detector",
    "PIIMiddleware",
    "PIIPolicy",
    "PIIVerdict",
    "PatternDetector",
    "Span",
    "StreamRestorer",
    "Vault",
    "mask_text",
    "restore_text",
]
