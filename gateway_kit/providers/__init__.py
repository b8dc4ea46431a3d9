"""Upstream model services behind the ``Provider`` protocol (``base``): OpenAI-compatible APIs
(``openai``), Anthropic's Messages API translated both ways (``anthropic``), and the offline
``mock`` (deterministic answers, embeddings, injected faults)."""
